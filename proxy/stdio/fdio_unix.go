//go:build unix

package stdio

import (
	"io"
	"os"
	"syscall"
)

// Blocking returns a reader or writer for f that waits in the kernel: when
// f is a pipe or socket that its creator left non-blocking (as Go and
// libuv do for the pipes they give a child), each message would otherwise
// cost a read that fails with EAGAIN, a wait in the poller and a second
// read. The descriptor is switched to blocking mode, which only this
// process sees when it alone holds that end; anything else (a terminal, a
// regular file, an error) keeps f as it is.
func Blocking(f *os.File) io.ReadWriter {
	st, err := f.Stat()
	if err != nil || st.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return f
	}
	fd := int(f.Fd()) // Fd puts f in blocking mode
	return fdIO{fd: fd, f: f}
}

// fdIO reads and writes a blocking descriptor with plain system calls,
// keeping its *os.File alive (and so the descriptor open).
type fdIO struct {
	fd int
	f  *os.File
}

func (d fdIO) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(d.fd, p)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, &os.PathError{Op: "read", Path: d.f.Name(), Err: err}
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (d fdIO) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := syscall.Write(d.fd, p[written:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return written, &os.PathError{Op: "write", Path: d.f.Name(), Err: err}
		}
		written += n
	}
	return written, nil
}
