package conn

import (
	"log/slog"
	"strconv"
	"strings"
)

// conn logs through the logger of the loop a connection or a socket lives
// on (Loop.Logger: the group's loop.WithLogger), never slog.Default()
// itself, so a program that gives its group a logger gets conn's records
// there too.

// stackValue is a goroutine's stack as debug.Stack prints it, logged as a
// group with one attribute per frame ("0", "1", …), each frame on one line
// ("function file:line +offset"), starting at the panic (the frames of the
// recovery itself are left out). A TextHandler prints the frames as
// stack.0="…" stack.1="…", a JSONHandler as an object of strings, where a
// single string would carry its newlines and tabs escaped. It is formatted
// only when a handler takes the record.
type stackValue []byte

// LogValue implements slog.LogValuer.
func (s stackValue) LogValue() slog.Value {
	frames := stackFrames(string(s))
	attrs := make([]slog.Attr, len(frames))
	for i, f := range frames {
		attrs[i] = slog.String(strconv.Itoa(i), f)
	}
	return slog.GroupValue(attrs...)
}

// stackFrames splits debug.Stack's text into frames: each function line
// joined with the file line under it (indented with a tab). The
// "goroutine N [running]:" header is dropped, and so are the frames before
// the first panic( frame (debug.Stack and the recovery), if there is one.
func stackFrames(s string) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 0 && strings.HasPrefix(lines[0], "goroutine ") {
		lines = lines[1:]
	}
	frames := make([]string, 0, len(lines)/2+1)
	for i := 0; i < len(lines); i++ {
		f := lines[i]
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\t") {
			f += " " + strings.TrimSpace(lines[i+1])
			i++
		}
		frames = append(frames, f)
	}
	for i, f := range frames {
		if strings.HasPrefix(f, "panic(") {
			return frames[i:]
		}
	}
	return frames
}
