package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"damselfly/integration/harness"
)

// runResult is one run: every node pulled the image at once through its
// own mirror, from fresh caches and fresh daemons.
type runResult struct {
	Nodes int    `json:"nodes"`
	Mode  string `json:"mode"`
	Run   int    `json:"run"`
	// Ready is how long the deployment took to come up, from the
	// registry's start to the last peer's readiness.
	Ready float64 `json:"ready_seconds"`
	// Seconds is each node's completion: from the moment every skopeo
	// was started to its exit.
	Seconds []float64 `json:"seconds"`
	// OriginTx is what the origin's interface sent from the registry's
	// start to the end of the pulls (frames, headers included); NodeRx
	// what each node's interface received over the same time.
	OriginTx int64   `json:"origin_tx_bytes"`
	NodeRx   []int64 `json:"node_rx_bytes"`
	// CPU-seconds (user+sys): each node's peer from /proc/PID/stat at
	// the end of the pulls, its skopeo from wait4; the scheduler and the
	// registry likewise from /proc.
	Peer      []float64 `json:"peer_cpu_seconds"`
	Skopeo    []float64 `json:"skopeo_cpu_seconds"`
	Scheduler float64   `json:"scheduler_cpu_seconds"`
	Registry  float64   `json:"registry_cpu_seconds"`
	Load      string    `json:"loadavg_before"`
	// OriginBlobs is, from the origin's access log, each blob's GETs and
	// the bytes they sent.
	OriginBlobs []originBlob `json:"origin_blobs"`
}

// runOnce deploys mode on nt, starts `skopeo copy` from every node's
// mirror at once, waits for them (bounded by -run-timeout), checks what
// each pulled, samples CPU and counters, and stops everything.
func (b *rig) runOnce(ctx context.Context, nt *net, mode string, run int, pi *pullImage) (_ *runResult, err error) {
	r := &runResult{Nodes: len(nt.nodes), Mode: mode, Run: run, Load: loadavg()}
	dir := filepath.Join(b.work, "runs", fmt.Sprintf("n%d-%s-%d", r.Nodes, mode, run))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if !b.o.keep && err == nil {
			os.RemoveAll(dir)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, b.o.runTimeout)
	defer cancel()

	originBase, err := harness.ReadLink(ctx, nt.origin.Netns())
	if err != nil {
		return nil, err
	}
	nodeBase := make([]harness.LinkBytes, len(nt.nodes))
	for i, h := range nt.nodes {
		if nodeBase[i], err = harness.ReadLink(ctx, h.Netns()); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	d, err := b.deploy(ctx, nt, mode, dir)
	if err != nil {
		return nil, fmt.Errorf("deploy %d nodes, %s: %w", r.Nodes, mode, err)
	}
	defer func() {
		if serr := d.stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop %d nodes, %s: %w", r.Nodes, mode, serr))
		}
	}()
	r.Ready = time.Since(start).Seconds()

	src := "docker://" + mirrorAddr + "/" + pi.Repo + ":" + pi.Tag
	cmds := make([]*exec.Cmd, len(d.nodes))
	outs := make([]*bytes.Buffer, len(d.nodes))
	dsts := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		dsts[i] = filepath.Join(n.dir, "pulled")
		to := "dir:" + dsts[i]
		if b.o.dest == destOCI {
			to = "oci:" + dsts[i] + ":" + pi.Tag
		}
		cmds[i] = n.h.Command(ctx, "skopeo", "copy", "--insecure-policy", "--src-tls-verify=false", src, to)
		outs[i] = &bytes.Buffer{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		cmds[i].WaitDelay = time.Second
	}
	r.Seconds = make([]float64, len(d.nodes))
	r.Skopeo = make([]float64, len(d.nodes))
	errs := make([]error, len(d.nodes))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, cmd := range cmds {
		wg.Go(func() {
			if errs[i] = cmd.Run(); errs[i] != nil {
				errs[i] = fmt.Errorf("%s skopeo: %w: %s", d.nodes[i].h.Name(), errs[i], outs[i].Bytes())
			}
			r.Seconds[i] = time.Since(t0).Seconds()
			if cmd.ProcessState != nil {
				if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
					r.Skopeo[i] = tv(ru.Utime) + tv(ru.Stime)
				}
			}
		})
	}
	wg.Wait()
	for i := range d.nodes {
		if errs[i] == nil {
			if err := checkPull(dsts[i], b.o.dest, pi); err != nil {
				errs[i] = fmt.Errorf("%s pulled: %w", d.nodes[i].h.Name(), err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, d.logTails())
	}
	b.logf("%d nodes, %s, run %d: done in %.2fs (slowest node)", r.Nodes, mode, run, quantile(r.Seconds, 1))

	// CPU and counters at the end of the pulls, before anything stops.
	r.Peer = make([]float64, len(d.nodes))
	for i, n := range d.nodes {
		if r.Peer[i], err = n.peer.CPUSeconds(); err != nil {
			return nil, err
		}
	}
	if d.scheduler != nil {
		if r.Scheduler, err = d.scheduler.CPUSeconds(); err != nil {
			return nil, err
		}
	}
	if r.Registry, err = d.registry.Proc().CPUSeconds(); err != nil {
		return nil, err
	}
	end, err := harness.ReadLink(ctx, nt.origin.Netns())
	if err != nil {
		return nil, err
	}
	r.OriginTx = end.Tx - originBase.Tx
	for i, h := range nt.nodes {
		c, err := harness.ReadLink(ctx, h.Netns())
		if err != nil {
			return nil, err
		}
		r.NodeRx = append(r.NodeRx, c.Rx-nodeBase[i].Rx)
	}
	if f, err := os.Open(d.registry.Proc().Log()); err == nil {
		r.OriginBlobs, err = parseAccessLog(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("origin access log: %w", err)
		}
	}
	for _, dst := range dsts {
		os.RemoveAll(dst) // gigabytes on 8 nodes; the peers' caches go with the run
	}
	return r, nil
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// loadavg is /proc/loadavg's first three fields, for the report: the
// machine is shared.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return ""
	}
	return string(bytes.Join(f[:3], []byte(" ")))
}
