package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// bar draws one progress line on a terminal, rewritten in place.
type bar struct {
	mu   sync.Mutex
	w    io.Writer
	last string
}

func newBar(w io.Writer) *bar { return &bar{w: w} }

func (b *bar) update(step string, done, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	line := step
	if total > 0 {
		const width = 30
		n := int(done * width / total)
		line = fmt.Sprintf("%-10s [%s%s] %d/%d", step, strings.Repeat("#", n), strings.Repeat(" ", width-n), done, total)
	}
	if line == b.last {
		return
	}
	b.last = line
	fmt.Fprintf(b.w, "\r\033[K%s", line)
	if total > 0 && done == total {
		fmt.Fprintln(b.w)
	}
}
