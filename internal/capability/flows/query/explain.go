package query

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

// explainEmpty says on stderr why a query printed nothing: whether the
// store holds records at all and when, whether any is in the window, and
// whether an agent is writing the store, so that a quiet host is not
// mistaken for a broken agent (or the reverse).
func explainEmpty(ctx context.Context, w io.Writer, cmd string, rd *store.Reader, q *queryFlags, sq store.Query, now time.Time) {
	fmt.Fprintf(w, "loupe %s: no records matched\n", cmd)
	fmt.Fprintf(w, "  window: %s\n", describeWindow(q, sq))
	st, err := rd.Stats()
	switch {
	case err != nil:
		fmt.Fprintf(w, "  store:  %v\n", err)
	case st.Records == 0:
		fmt.Fprintf(w, "  store:  empty: no record was stored yet\n")
	default:
		span := fmt.Sprintf("%d %s from %s to %s", st.Records, plural(st.Records, "record", "records"),
			localTime(st.Oldest), localTime(st.Newest))
		inWindow := !(sq.Since.After(st.Newest) || (!sq.Until.IsZero() && sq.Until.Before(st.Oldest)))
		if inWindow {
			// The window alone: is it the filters?
			wq := store.NewQuery()
			wq.Since, wq.Until = sq.Since, sq.Until
			var rep store.Report
			wq.Report = &rep
			if err := rd.Select(ctx, wq, store.NewestFirst(), 1, func(*flow.Record) error { return nil }); err == nil && rep.Matched > 0 {
				fmt.Fprintf(w, "  store:  %s; %d in the window, none matching the filters\n", span, rep.Matched)
				break
			}
		}
		fmt.Fprintf(w, "  store:  %s; none in the window\n", span)
	}
	switch ws := rd.Writer(); {
	case !ws.Known:
		fmt.Fprintf(w, "  agent:  unknown (cannot read the kernel's lock table)\n")
	case ws.Running:
		fmt.Fprintf(w, "  agent:  %s, writing this store: it stores flows as it evicts them (every cache_active_timeout); a quiet host has none\n", ws)
	default:
		fmt.Fprintf(w, "  agent:  not running (no process holds %s): nothing new is stored until 'loupe run' runs on this store\n",
			filepath.Join(q.store, "LOCK"))
	}
}

func describeWindow(q *queryFlags, sq store.Query) string {
	from, to := "the oldest record", "now"
	if !sq.Since.IsZero() {
		from = localTime(sq.Since)
		if q.since.abs.IsZero() {
			from += fmt.Sprintf(" (--since %s)", shortDuration(q.since.ago))
		}
	}
	if !sq.Until.IsZero() {
		to = localTime(sq.Until)
	}
	return from + " to " + to
}

func localTime(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") }
