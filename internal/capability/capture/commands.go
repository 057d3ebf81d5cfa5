package capture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"loupe/internal/api"
	"loupe/internal/cli"
)

// Commands are the capture capability's CLI verbs; both talk to the
// running agent through its control API.
func Commands() []cli.Command {
	return []cli.Command{
		{Name: "triggers", Summary: "list, add or delete the running agent's capture triggers", Run: triggersCmd},
		{Name: "captures", Summary: "list the running agent's recent triggered connections and its capture files", Run: capturesCmd},
		{Name: "capture", Summary: "stream the running agent's triggered captures as pcapng (--follow)", Run: captureCmd},
	}
}

const triggersSynopsis = "list|add TRIGGER|delete NAME [--json] [--control PATH]"

func triggersCmd(args []string, stdout, stderr io.Writer) error {
	verb, rest, args := cli.SplitVerb(args, "list")
	fs := cli.NewFlagSet("triggers", triggersSynopsis, stdout, stderr)
	asJSON := fs.Bool("json", false, "print the agent's answer as JSON")
	socket := api.ControlFlag(fs)
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	c, err := api.NewClient(*socket)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	var list TriggerList
	switch verb {
	case "list":
		if len(rest) > 0 {
			return usageErr(stderr, "list takes no argument")
		}
		if err := c.Get(ctx, TriggersPath, &list); err != nil {
			return err
		}
	case "add":
		if len(rest) == 0 {
			return usageErr(stderr, "add needs a TRIGGER, e.g. 'http.status=500-599'")
		}
		body, _ := json.Marshal(TriggerRequest{Trigger: rest[0]})
		resp, err := c.Do(ctx, http.MethodPost, TriggersPath, bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var t Trigger
		if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
			return fmt.Errorf("decoding the agent's answer: %w", err)
		}
		list.Triggers = []Trigger{t}
	case "delete":
		if len(rest) == 0 {
			return usageErr(stderr, "delete needs the NAME of a trigger (loupe triggers list)")
		}
		resp, err := c.Do(ctx, http.MethodDelete, TriggersPath+"/"+url.PathEscape(rest[0]), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			return fmt.Errorf("decoding the agent's answer: %w", err)
		}
	default:
		return usageErr(stderr, fmt.Sprintf("unknown verb %q: want list, add or delete", verb))
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if verb == "add" {
			return enc.Encode(list.Triggers[0])
		}
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NAME\tTRIGGER\n")
	for _, t := range list.Triggers {
		fmt.Fprintf(tw, "%s\t%s\n", t.Name, t.Text)
	}
	return tw.Flush()
}

// capturesCmd is `loupe captures`: what the Captures page lists (GET
// /api/v1/captures), the triggered connections newest first and the
// capture files.
func capturesCmd(args []string, stdout, stderr io.Writer) error {
	return api.ReadCmd("captures", CapturesPath, 15*time.Second, args, stdout, stderr, printCaptures)
}

// printCaptures writes the triggered connections, newest first, then the
// capture files.
func printCaptures(stdout io.Writer, list *CaptureList) error {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "TIME\tTRACE\tTRIGGER\tSTATUS\tSOURCE\tDESTINATION\tIFACE\tREQUEST\n")
	for _, t := range list.Traces {
		status := "tcp.rst"
		if t.Status != 0 {
			status = strconv.Itoa(int(t.Status))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Time.Local().Format("2006-01-02 15:04:05"), t.ID, t.Trigger, status, t.Src, t.Dst, t.Iface, t.Request)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if list.Dir == "" {
		fmt.Fprintln(stdout, "\nno capture directory (capture.dir): triggered packets go to followers only")
		return nil
	}
	fmt.Fprintf(stdout, "\ncapture files in %s:\n", list.Dir)
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for _, f := range list.Files {
		fmt.Fprintf(tw, "%s\t%d\t%s\t\n", f.Name, f.Size, f.Time.Local().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}

func usageErr(stderr io.Writer, msg string) error { return cli.Usage(stderr, "triggers", msg) }

const captureSynopsis = "--follow | --filter EXPR [--iface GLOB] [--count N] [--snaplen N]  [-w FILE|-] [--duration D] [--control PATH]"

func captureCmd(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("capture", captureSynopsis, stdout, stderr)
	follow := fs.Bool("follow", false, "stream the triggered connections' packets as the agent captures them")
	out := fs.String("w", "-", "write the pcapng stream to `file` (created 0600), or - for standard output")
	duration := fs.Duration("duration", 0, "stop after this long (0: until interrupted or the agent stops)")
	filter := fs.String("filter", "", "capture the packets matching this pcap filter now (tcpdump syntax, docs/capture.md); '' for every packet")
	var ifaces []string
	fs.Func("iface", "with --filter: only on interfaces matching this `glob` (repeatable)", func(s string) error {
		ifaces = append(ifaces, s)
		return nil
	})
	count := fs.Uint64("count", 0, "with --filter: stop after this many packets")
	snaplen := fs.Uint("snaplen", 0, "with --filter: bytes captured of each packet (0: all)")
	socket := api.ControlFlag(fs)
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	onDemand := len(ifaces) > 0 || *count > 0
	fs.Visit(func(f *flag.Flag) { onDemand = onDemand || f.Name == "filter" })
	if onDemand == *follow {
		fmt.Fprintf(stderr, "loupe capture: say --follow (the triggered captures as they happen) or --filter EXPR (a capture now)\nsee 'loupe capture --help'\n")
		return cli.ErrUsage
	}
	if *out == "-" && isTerminal(stdout) {
		return errors.New("-w -: standard output is a terminal; pipe it (| tcpdump -r -) or give -w FILE")
	}
	c, err := api.NewClient(*socket)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		// An on-demand capture's end is the agent's (it closes the
		// stream after its last packet); the margin only guards
		// against an agent that never answers.
		wait := *duration
		if onDemand {
			wait += 10 * time.Second
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	var body io.ReadCloser
	if onDemand {
		req := CaptureRequest{Filter: *filter, Ifaces: ifaces, Count: *count, Snaplen: uint32(*snaplen)}
		if *duration > 0 {
			// The agent stops too, so that the stream ends cleanly.
			req.Duration = duration.String()
		}
		b, _ := json.Marshal(req)
		body, err = c.Stream(ctx, http.MethodPost, CapturePath, bytes.NewReader(b))
	} else {
		body, err = c.Stream(ctx, http.MethodGet, FollowPath, nil)
	}
	if err != nil {
		return err
	}
	defer body.Close()
	w := stdout
	if *out != "-" {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	_, err = io.Copy(w, body)
	if ctx.Err() != nil {
		// Interrupted or the duration ran out: a normal end.
		return nil
	}
	return err
}

// isTerminal reports whether w is a character device (a terminal): pcapng
// would garble it.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
