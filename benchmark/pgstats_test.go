package benchmark

import (
	"math"
	"testing"
)

// The round trips are read from ss's lines: each connection's, then its
// information, counted only for the connections of the database measured.
func TestParseSegments(t *testing.T) {
	out := "0      0      127.0.0.1:5432 127.0.0.1:48970\n" +
		"\t cubic wscale:7,7 rto:204 bytes_received:113327 segs_out:618 segs_in:614 data_segs_out:612 data_segs_in:303 send 1bps\n" +
		"0      0      127.0.0.1:5432 127.0.0.1:43706\n" +
		"\t cubic segs_in:13 data_segs_out:2 data_segs_in:2\n" +
		"0      0      [::1]:5432 [::1]:50000\n" +
		"\t cubic data_segs_in:7\n"
	got := parseSegments(out, []int32{48970, 50000})
	if len(got) != 2 || got["127.0.0.1:48970"] != 303 || got["[::1]:50000"] != 7 {
		t.Fatalf("segments %v, want 303 from 127.0.0.1:48970 and 7 from [::1]:50000", got)
	}
}

// The lock's time per batch is fitted as a + b×n.
func TestFitLine(t *testing.T) {
	a, b := fitLine([]float64{1, 2, 4}, []float64{3, 5, 9})
	if math.Abs(a-1) > 1e-9 || math.Abs(b-2) > 1e-9 {
		t.Fatalf("a = %g, b = %g, want 1 and 2", a, b)
	}
	if a, b := fitLine([]float64{2, 2}, []float64{4, 6}); a != 0 || b != 2.5 {
		t.Fatalf("one n: a = %g, b = %g, want 0 and 2.5", a, b)
	}
}
