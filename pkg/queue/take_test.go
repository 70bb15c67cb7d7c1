package queue

import (
	"slices"
	"testing"
)

func TestTakeStopsAtMaxEmptyOrClosed(t *testing.T) {
	in := make(chan int, 8)
	for i := range 5 {
		in <- i
	}
	got := Take(in, []int{-1}, 3)
	if !slices.Equal(got, []int{-1, 0, 1}) {
		t.Fatalf("at max: got %v, want [-1 0 1]", got)
	}
	got = Take(in, nil, 10)
	if !slices.Equal(got, []int{2, 3, 4}) {
		t.Fatalf("until empty: got %v, want [2 3 4]", got)
	}
	in <- 5
	close(in)
	got = Take(in, nil, 10)
	if !slices.Equal(got, []int{5}) {
		t.Fatalf("until closed: got %v, want [5]", got)
	}
}

func TestBatchesTakesWhatWaitsAndClearsIt(t *testing.T) {
	in := make(chan *int, 8)
	vals := []int{0, 1, 2, 3, 4}
	for i := range vals {
		in <- &vals[i]
	}
	close(in)
	var sizes []int
	var last []*int
	Batches(in, 2, func(b []*int) {
		sizes = append(sizes, len(b))
		last = b
	})
	if !slices.Equal(sizes, []int{2, 2, 1}) {
		t.Fatalf("batch sizes %v, want [2 2 1]", sizes)
	}
	if last[0] != nil {
		t.Fatalf("the last batch still holds its message after fn returned")
	}
}
