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

	"damselfly/integration/bench"
	"damselfly/integration/harness"
)

// runResult is one run: every node read its workload at once, from
// fresh caches and fresh daemons.
type runResult struct {
	Nodes    int    `json:"nodes"`
	Mode     string `json:"mode"`
	Workload string `json:"workload"`
	Run      int    `json:"run"`
	// Ready is how long the deployment took to come up, every mount
	// answering (bootstrap layers fetched), from the registry's start.
	Ready float64 `json:"ready_seconds"`
	// Seconds is each node's completion: from the moment all readers
	// were started to its reader's exit.
	Seconds []float64 `json:"seconds"`
	// OriginTx is what the origin's interface sent from its start to
	// the end of the reads (frames, headers included); NodeRx what each
	// node's interface received over the same time.
	OriginTx int64   `json:"origin_tx_bytes"`
	NodeRx   []int64 `json:"node_rx_bytes"`
	// CPU is CPU-seconds (user+sys) per node and process, from
	// /proc/PID/stat at the end of the reads for the daemons and from
	// wait4 for the reader (its children included); Scheduler and
	// Registry are the cluster-wide ones.
	CPU       []nodeCPU `json:"cpu"`
	Scheduler float64   `json:"scheduler_cpu_seconds"`
	Registry  float64   `json:"registry_cpu_seconds"`
	Load      string    `json:"loadavg_before"`
}

// nodeCPU is one node's CPU-seconds by process: the daemons', or in
// the pull mode skopeo's and umoci's; the reader's in both.
type nodeCPU struct {
	Mount  float64 `json:"mount"`
	Peer   float64 `json:"peer"`
	Skopeo float64 `json:"skopeo,omitempty"`
	Umoci  float64 `json:"umoci,omitempty"`
	Reader float64 `json:"reader"`
}

// total is every process of the node.
func (c nodeCPU) total() float64 { return c.Mount + c.Peer + c.Skopeo + c.Umoci + c.Reader }

// runOnce deploys mode on nt, starts every node's reader of workload at
// once, waits for them (bounded by -run-timeout), samples CPU and
// counters, and stops everything.
func (b *rig) runOnce(ctx context.Context, nt *net, mode, workload string, run int, bi *benchImage) (_ *runResult, err error) {
	r := &runResult{Nodes: len(nt.nodes), Mode: mode, Workload: workload, Run: run, Load: loadavg()}
	dir := filepath.Join(b.work, "runs", fmt.Sprintf("n%d-%s-%s-%d", r.Nodes, mode, workload, run))
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
	d, err := b.deploy(ctx, nt, mode, dir, b.regDir, bi)
	if err != nil {
		return nil, fmt.Errorf("deploy %d nodes, %s: %w", r.Nodes, mode, err)
	}
	defer func() {
		if serr := d.stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop %d nodes, %s: %w", r.Nodes, mode, serr))
		}
	}()
	r.Ready = time.Since(start).Seconds()

	r.Seconds = make([]float64, len(d.nodes))
	r.CPU = make([]nodeCPU, len(d.nodes))
	errs := make([]error, len(d.nodes))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, n := range d.nodes {
		wg.Go(func() {
			errs[i] = b.nodeWork(ctx, d, n, workload, bi, &r.CPU[i])
			r.Seconds[i] = time.Since(t0).Seconds()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, d.logTails())
	}
	b.logf("%d nodes, %s, %s, run %d: done in %.2fs (slowest node)", r.Nodes, mode, workload, run, max0(r.Seconds))

	// CPU and counters at the end of the reads, before anything stops.
	for i, n := range d.nodes {
		if mode == modePull {
			continue
		}
		if r.CPU[i].Mount, err = cpuOf(n.mount); err != nil {
			return nil, err
		}
		if r.CPU[i].Peer, err = cpuOf(n.peer); err != nil {
			return nil, err
		}
	}
	if d.scheduler != nil {
		if r.Scheduler, err = cpuOf(d.scheduler); err != nil {
			return nil, err
		}
	}
	if r.Registry, err = cpuOf(d.registry.Proc()); err != nil {
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
	return r, nil
}

// nodeWork is node n's part of a run, started at the same moment as
// every other node's: its reader, after (pull mode) skopeo's copy of
// the plain image from the origin and umoci's unpacking of it, each
// step's CPU-seconds (wait4: its children included) added to cpu.
func (b *rig) nodeWork(ctx context.Context, d *deployment, n *node, workload string, bi *benchImage, cpu *nodeCPU) error {
	type step struct {
		cmd *exec.Cmd
		cpu *float64
	}
	var steps []step
	if d.mode == modePull {
		layoutDir := filepath.Join(n.dir, "pull")
		steps = append(steps,
			step{n.h.Command(ctx, "skopeo", "copy", "--quiet", "--insecure-policy", "--src-tls-verify=false",
				"docker://"+d.registry.Host()+"/"+bi.Repo+":"+plainTag, "oci:"+layoutDir+":"+plainTag), &cpu.Skopeo},
			step{n.h.Command(ctx, "umoci", "unpack", "--image", layoutDir+":"+plainTag, filepath.Dir(n.mnt)), &cpu.Umoci})
	}
	steps = append(steps, step{b.readerCmd(ctx, n, workload), &cpu.Reader})
	for _, s := range steps {
		var out bytes.Buffer
		s.cmd.Stdout, s.cmd.Stderr, s.cmd.WaitDelay = &out, &out, time.Second
		err := s.cmd.Run()
		if s.cmd.ProcessState != nil {
			if ru, ok := s.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				*s.cpu += tv(ru.Utime) + tv(ru.Stime)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w: %s", n.h.Name(), filepath.Base(s.cmd.Path), err, out.Bytes())
		}
	}
	return nil
}

// readerCmd is the reader of workload on node n, in n's namespace: this
// program in reader mode over a file list, or, for the Debian image's
// startup, the Python import itself chrooted in the mount.
func (b *rig) readerCmd(ctx context.Context, n *node, workload string) *exec.Cmd {
	if workload == workloadStartup && b.o.profile == profileDebian {
		cmd := n.h.Command(ctx, "/usr/sbin/chroot", n.mnt, "/usr/bin/python3", "-c", bench.PythonImport)
		cmd.Env = bench.PythonEnv
		return cmd
	}
	workers := b.o.workers
	if workload == workloadStartup {
		workers = 1 // an application start opens its files one after another
	}
	return n.h.Command(ctx, b.self, "-reader-list", b.lists[workload], "-reader-root", n.mnt,
		"-reader-workers", fmt.Sprint(workers))
}

// cpuOf is a running process's CPU-seconds so far, its reaped children
// included.
func cpuOf(p *harness.Proc) (float64, error) {
	if p.Exited() {
		return 0, fmt.Errorf("%s exited during the run: %v", p.Name(), p.Err())
	}
	c, err := harness.ReadProcCPU(p.Pid())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.Name(), err)
	}
	return c.Total(), nil
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func max0(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

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
