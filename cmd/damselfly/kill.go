package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

var errGone = errors.New("process has exited")

// syscallKill0 returns nil while process pid is running; an exited
// process that its parent has not reaped yet (a zombie) counts as gone.
func syscallKill0(pid int) error {
	if err := syscall.Kill(pid, 0); err != nil {
		return err
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errGone
	}
	// The state follows the parenthesised command name.
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'Z' {
		return errGone
	}
	return nil
}
