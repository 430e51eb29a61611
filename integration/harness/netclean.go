package harness

// What removes a Net's namespaces, its own at Close and dead runs' at
// NewNet, and the bounded runner of ip and tc commands.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killNetns SIGKILLs every process in namespace ns and returns their
// pids.
func killNetns(ctx context.Context, ns string) []int {
	out, err := runCmd(ctx, "ip", "netns", "pids", ns)
	if err != nil {
		return nil
	}
	var pids []int
	for f := range strings.FieldsSeq(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
			pids = append(pids, pid)
		}
	}
	return pids
}

// deleteNetns deletes namespace ns; one already gone (or deleted by a
// concurrent sweep meanwhile) is no error.
func deleteNetns(ctx context.Context, ns string) error {
	gone := func() bool {
		_, err := os.Stat(filepath.Join(netnsDir, ns))
		return errors.Is(err, os.ErrNotExist)
	}
	if gone() {
		return nil
	}
	if _, err := runCmd(ctx, "ip", "netns", "del", ns); err != nil && !gone() {
		return err
	}
	return nil
}

// sweepNets deletes the namespaces of dead Nets: named dfly-ID-*, whose
// ID.lock is missing or not locked by a live process. Namespaces of
// Nets alive in other processes are left alone.
func sweepNets(ctx context.Context) error {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	byID := map[string][]string{}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), netPrefix)
		if !ok || len(rest) < 8 || rest[6] != '-' {
			continue
		}
		id := netPrefix + rest[:6]
		byID[id] = append(byID[id], e.Name())
	}
	var errs []error
	for id, names := range byID {
		lockPath := filepath.Join(netLockDir, id+".lock")
		f, err := os.Open(lockPath)
		if err == nil {
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
				f.Close() // a live Net
				continue
			}
		}
		for _, ns := range names {
			killNetns(ctx, ns)
			if err := deleteNetns(ctx, ns); err != nil {
				errs = append(errs, err)
			}
		}
		if f != nil {
			os.Remove(lockPath)
			f.Close()
		}
	}
	return errors.Join(errs...)
}

// runAll runs each command in turn and stops at the first failure.
func runAll(ctx context.Context, cmds ...[]string) error {
	for _, c := range cmds {
		if _, err := runCmd(ctx, c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// runCmd runs one command for at most netCmdWait and returns its
// output; an error carries the command line and its output.
func runCmd(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, netCmdWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}
