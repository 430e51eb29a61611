package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"damselfly/scheduler/server"
)

// preheatOptions are the preheat subcommand's flags.
type preheatOptions struct {
	image        string
	scheduler    string
	peers        int
	all          bool
	labels       []string
	prefetchOnly bool
	timeout      time.Duration
	interval     time.Duration
}

// preheatHTTPTimeout bounds one admin API call.
const preheatHTTPTimeout = 30 * time.Second

func newPreheat(*globals) *cobra.Command {
	o := preheatOptions{}
	cmd := &cobra.Command{
		Use:   "preheat IMAGE",
		Short: "Have peers fetch a RAFS image's chunks before jobs start",
		Long: `Preheat asks the scheduler (its admin API, --scheduler) to have peers fetch
the chunks of IMAGE, a docker://HOST/REPO:TAG RAFS image (docker:// may be left
out), into their node caches: all chunks, or with --prefetch-only those of the
files in the image's prefetch table. Peers fetch through each other, so the
registry sends each chunk about once.

Targets are the live peers carrying every --label k=v: all of them, or --peers N
spread over zones, racks and hosts. Progress shows as a bar on a terminal and
as lines otherwise; a summary follows. The exit code is non-zero when any peer
failed. SIGINT (Ctrl-C) cancels the job on every peer, waits for the scheduler
to confirm, and exits non-zero.`,
		Args: cobra.ExactArgs(1),
	}
	f := cmd.Flags()
	f.StringVar(&o.scheduler, "scheduler", "http://"+server.DefaultAdminListen, "the scheduler's admin API URL")
	f.IntVar(&o.peers, "peers", 0, "preheat this many peers (default: all that match)")
	f.BoolVar(&o.all, "all", false, "preheat every matching peer")
	f.StringArrayVar(&o.labels, "label", nil, "only peers with this label, k=v (repeatable)")
	f.BoolVar(&o.prefetchOnly, "prefetch-only", false, "only the chunks of the prefetch table's files")
	f.DurationVar(&o.timeout, "timeout", 0, "give up (the job fails) after this long (default: the scheduler's, 1h)")
	f.DurationVar(&o.interval, "poll-interval", 500*time.Millisecond, "how often to ask the scheduler for progress")
	_ = f.MarkHidden("poll-interval")
	cmd.MarkFlagsMutuallyExclusive("peers", "all")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.image = args[0]
		return runPreheat(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	return cmd
}

// preheatRequest turns the options into the admin API's request.
func (o preheatOptions) request() (server.PreheatRequestJSON, error) {
	img := o.image
	if !strings.Contains(img, "://") {
		img = "docker://" + img
	}
	req := server.PreheatRequestJSON{Image: img, Peers: o.peers, All: o.all, PrefetchOnly: o.prefetchOnly}
	if o.peers < 0 {
		return req, fmt.Errorf("--peers %d: want at least 1", o.peers)
	}
	if o.timeout < 0 {
		return req, fmt.Errorf("--timeout %v: want a positive duration", o.timeout)
	}
	if o.timeout > 0 {
		req.Timeout = o.timeout.String()
	}
	for _, l := range o.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return req, fmt.Errorf("--label %q: want key=value", l)
		}
		if req.Labels == nil {
			req.Labels = map[string]string{}
		}
		req.Labels[k] = v
	}
	return req, nil
}

// runPreheat posts the job, follows it to its end and prints a summary.
// When ctx ends first (SIGINT), it cancels the job and waits for the
// scheduler to confirm.
func runPreheat(ctx context.Context, o preheatOptions, stdout, stderr io.Writer) error {
	req, err := o.request()
	if err != nil {
		return err
	}
	base := strings.TrimSuffix(o.scheduler, "/")
	c := &http.Client{Timeout: preheatHTTPTimeout}
	var job server.PreheatJSON
	if err := callAdmin(ctx, c, http.MethodPost, base+"/api/v1/preheat", req, http.StatusAccepted, &job); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "preheat %s: %s on %d peers\n", job.ID, job.Image, len(job.Peers))

	isTerm := false
	if f, ok := stderr.(*os.File); ok {
		isTerm = term.IsTerminal(int(f.Fd()))
	}
	var bar *progress
	if isTerm {
		bar = newProgress("preheat", false)
	}
	var shown uint64
	states := map[string]string{}
	report := func(j server.PreheatJSON) {
		if bar != nil {
			bar.SetTotal(int64(j.BytesTotal))
			if j.BytesDone > shown {
				bar.Add(int64(j.BytesDone - shown))
				shown = j.BytesDone
			}
			return
		}
		// Plain lines: one per peer that ended, and the totals now and then.
		for _, p := range j.Peers {
			if p.State != states[p.Peer] && p.State != "pending" && p.State != "running" {
				line := fmt.Sprintf("peer %s: %s", p.Peer, p.State)
				if p.Message != "" {
					line += ": " + p.Message
				}
				fmt.Fprintln(stderr, line)
			}
			states[p.Peer] = p.State
		}
	}

	t := time.NewTicker(o.interval)
	defer t.Stop()
	lastLine := time.Now()
	for job.State == "running" {
		select {
		case <-ctx.Done():
			if bar != nil {
				bar.Finish()
			}
			fmt.Fprintf(stderr, "interrupted: cancelling preheat %s\n", job.ID)
			dctx, cancel := context.WithTimeout(context.Background(), preheatHTTPTimeout)
			err := callAdmin(dctx, c, http.MethodDelete, base+"/api/v1/preheat/"+job.ID, nil, http.StatusOK, &job)
			cancel()
			if err != nil {
				return fmt.Errorf("cancel preheat %s: %w", job.ID, err)
			}
			printPreheatSummary(stdout, job)
			return errSilent
		case <-t.C:
		}
		if err := callAdmin(ctx, c, http.MethodGet, base+"/api/v1/preheat/"+job.ID, nil, http.StatusOK, &job); err != nil {
			if ctx.Err() != nil {
				continue // the interrupt is handled above
			}
			return err
		}
		report(job)
		if bar == nil && time.Since(lastLine) >= 5*time.Second {
			lastLine = time.Now()
			fmt.Fprintf(stderr, "preheat %s: %s of %s, %d of %d chunks\n", job.ID,
				humanBytes(int64(job.BytesDone)), humanBytes(int64(job.BytesTotal)), job.ChunksDone, job.ChunksTotal)
		}
	}
	if bar != nil {
		bar.Finish()
	}
	printPreheatSummary(stdout, job)
	if job.State != "done" {
		return errSilent
	}
	return nil
}

// printPreheatSummary prints the job's outcome: peers by state, bytes,
// time, and each failure.
func printPreheatSummary(w io.Writer, j server.PreheatJSON) {
	by := map[string]int{}
	for _, p := range j.Peers {
		by[p.State]++
	}
	took := time.Duration(0)
	if j.Finished != nil {
		took = j.Finished.Sub(j.Started).Round(time.Millisecond)
	}
	fmt.Fprintf(w, "preheat %s %s: %d peers done, %d failed, %d cancelled; %s of %s (%d of %d chunks) in %s\n",
		j.ID, j.State, by["done"], by["failed"], by["cancelled"],
		humanBytes(int64(j.BytesDone)), humanBytes(int64(j.BytesTotal)), j.ChunksDone, j.ChunksTotal, took)
	for _, p := range j.Peers {
		if p.State == "failed" {
			fmt.Fprintf(w, "  %s failed: %s\n", p.Peer, p.Message)
		}
	}
}

// callAdmin sends a JSON request to the admin API and decodes the answer
// into out; another status than want is an error carrying the API's
// message.
func callAdmin(ctx context.Context, c *http.Client, method, url string, in any, want int, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("scheduler: %s %s: %w", method, url, err)
	}
	if resp.StatusCode != want {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("scheduler: %s", e.Error)
		}
		return fmt.Errorf("scheduler: %s %s: %s", method, url, resp.Status)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("scheduler: %s %s: %w", method, url, err)
	}
	return nil
}
