package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"loupe/internal/api"
	"loupe/internal/cli"
)

// Commands are the rules capability's CLI verbs: they talk to the running
// agent through its control API.
func Commands() []cli.Command {
	return []cli.Command{
		{Name: "rules", Summary: "list, add, delete or replace the running agent's measurement rules", Run: rulesCmd},
	}
}

const rulesSynopsis = "list | add RULE | delete ID | replace --file FILE  [--json] [--control PATH]"

func rulesCmd(args []string, stdout, stderr io.Writer) error {
	verb, rest, args := cli.SplitVerb(args, "list")
	fs := cli.NewFlagSet("rules", rulesSynopsis, stdout, stderr)
	asJSON := fs.Bool("json", false, "print the agent's answer as JSON")
	file := fs.String("file", "", "replace: the rules `file` (one rule a line, README \"Rules\"); - for standard input")
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

	var list List
	call := func(method, path string, body any) error {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		resp, err := c.Do(ctx, method, path, rd)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			return fmt.Errorf("decoding the agent's answer: %w", err)
		}
		return nil
	}
	switch verb {
	case "list":
		if len(rest) > 0 {
			return cli.Usage(stderr, "rules", "list takes no argument")
		}
		err = c.Get(ctx, RulesPath, &list)
	case "add":
		if len(rest) == 0 {
			return cli.Usage(stderr, "rules", "add needs a RULE, e.g. 'dst=10.0.0.0/8 proto=tcp dport=873 skip'")
		}
		err = call(http.MethodPost, RulesPath, AddRequest{Rule: rest[0]})
	case "delete":
		if len(rest) == 0 {
			return cli.Usage(stderr, "rules", "delete needs the ID of a rule (loupe rules list)")
		}
		err = call(http.MethodDelete, RulesPath+"/"+url.PathEscape(rest[0]), nil)
	case "replace":
		if *file == "" {
			return cli.Usage(stderr, "rules", "replace needs --file FILE")
		}
		var data []byte
		if *file == "-" {
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(*file)
		}
		if err != nil {
			return err
		}
		err = call(http.MethodPut, RulesPath, ReplaceRequest{Text: string(data)})
	default:
		return cli.Usage(stderr, "rules", fmt.Sprintf("unknown verb %q: want list, add, delete or replace", verb))
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\tPACKETS\tMEASURED\tBYTES\tRULE\n")
	for _, r := range list.Rules {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", r.Rule.ID, r.Packets, r.MeasuredPackets, r.Bytes, r.Rule.String())
	}
	return tw.Flush()
}
