package benchmark

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
)

// CopyRelayCommand is the guard-bench command that runs CopyRelay:
// guard-bench bench-copy-relay -- CMD [ARGS...].
const CopyRelayCommand = "bench-copy-relay"

// CopyRelay runs argv with its stdin and stdout as pipes, copies in to the
// child's stdin (closing it when in ends) and the child's stdout to out,
// byte for byte, passes its stderr to errOut, and returns its exit status
// (128+N when signal N ended it). It is the least any stdio proxy does,
// the floor that guard-bench measures guard against. When ctx ends, the
// child is sent SIGTERM.
func CopyRelay(ctx context.Context, argv []string, in io.Reader, out, errOut io.Writer) (int, error) {
	if len(argv) == 0 {
		return 0, errors.New("copy relay: no command")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.Stderr = errOut
	childIn, err := cmd.StdinPipe()
	if err != nil {
		return 0, fmt.Errorf("copy relay: %w", err)
	}
	childOut, err := cmd.StdoutPipe()
	if err != nil {
		return 0, fmt.Errorf("copy relay: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("copy relay: starting %s: %w", argv[0], err)
	}
	go func() {
		// A child that stops reading ends the copy with an error; its
		// stdin is closed all the same.
		_, _ = io.Copy(childIn, in)
		childIn.Close()
	}()
	// Everything the child wrote is passed on before it is waited for
	// (Wait closes the pipe).
	_, copyErr := io.Copy(out, childOut)
	if copyErr != nil {
		// The child's next write fails rather than waits forever.
		childOut.Close()
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	case err != nil:
		return 0, fmt.Errorf("copy relay: waiting for %s: %w", argv[0], err)
	case copyErr != nil:
		return 0, fmt.Errorf("copy relay: writing out: %w", copyErr)
	}
	return 0, nil
}
