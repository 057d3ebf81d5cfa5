package query

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

// FollowPoll is how often --follow reads the store's manifest.
const FollowPoll = 250 * time.Millisecond

// followFlows prints the records the writer stores from now on, table rows
// or JSON lines, flushing after each batch, until ctx is done (Ctrl-C).
func followFlows(ctx context.Context, rd *store.Reader, q store.Query, o flowsOptions, w *bufio.Writer, stderr io.Writer) error {
	var tab *flowTable
	if !o.json {
		tab = newFlowTable(w, format{raw: o.raw}, false, true)
		// The header at once: the command is alive before the first record.
		if err := tab.flush(); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	var buf []byte
	ev := store.FollowEvents{
		Flush: func() error {
			if tab != nil {
				if err := tab.flush(); err != nil {
					return err
				}
			}
			return w.Flush()
		},
		Missed: func(n uint64, why string) {
			fmt.Fprintf(stderr, "warning: %d %s not printed (%s); they are in the store\n", n, plural(n, "record", "records"), why)
		},
		Skipped: func(e store.SegmentError) {
			fmt.Fprintf(stderr, "warning: skipped %v\n", e)
		},
	}
	return rd.Follow(ctx, q, FollowPoll, ev, func(r *flow.Record) error {
		if tab != nil {
			tab.add(r)
			return nil
		}
		buf = append(flow.AppendJSON(buf[:0], r), '\n')
		_, err := w.Write(buf)
		return err
	})
}
