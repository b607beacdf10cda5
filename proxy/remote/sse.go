package remote

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Reading the event streams of HTTP upstreams: a POST's answers, the
// session's GET stream, and the legacy transport's stream.

// readSSE calls emit with the data of each event of an SSE stream, read
// with buf (see readEventsWith).
func readSSE(r io.Reader, max int, buf []byte, emit func([]byte), tooLong func(size int)) {
	readEventsWith(r, max, buf, func(_ string, data []byte) { emit(data) }, tooLong)
}

// readEvents calls fn with each event of an SSE stream: its type
// ("message" when unnamed) and data. An event whose data is over max bytes
// is not kept: tooLong gets its size instead (at least max+1), and a line
// so long that it cannot be an event's ends the stream after saying so.
func readEvents(r io.Reader, max int, fn func(event string, data []byte), tooLong func(size int)) {
	readEventsWith(r, max, nil, fn, tooLong)
}

// readEventsWith is readEvents reading lines into buf (nil: a new buffer),
// which nothing keeps once it returns: fn gets data of its own.
func readEventsWith(r io.Reader, max int, buf []byte, fn func(event string, data []byte), tooLong func(size int)) {
	sc := bufio.NewScanner(r)
	limit := max + len("data: \r\n")
	// A buffer no larger than the limit, so that a line too long is
	// refused exactly as with the scanner's own buffer.
	sc.Buffer(buf[:0:min(cap(buf), limit)], limit)
	var data []byte
	size := 0 // of the event's data, kept or not
	event := ""
	dispatch := func() {
		switch {
		case size > max:
			tooLong(size)
		case len(data) > 0:
			if event == "" {
				event = "message"
			}
			fn(event, data)
		}
		data, size, event = nil, 0, ""
	}
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			dispatch()
		case bytes.HasPrefix(line, []byte("event:")):
			if v := bytes.TrimSpace(line[6:]); string(v) == "message" {
				event = "message" // the usual name, without a copy
			} else {
				event = string(v)
			}
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if size > 0 {
				size++
			}
			size += len(v)
			if size > max {
				data = nil
				continue
			}
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		tooLong(max + 1)
		return
	}
	dispatch()
}
