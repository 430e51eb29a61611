package host

import (
	"fmt"
	"log/slog"
	"os"
)

// PrepareStateDir creates dir, the state directory of a daemon that keeps
// its identity key (and, for a peer, its grant key and holdings) there,
// with mode 0700, or makes an existing one 0700 if group or others may
// enter it, saying so in the log.
func PrepareStateDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
		log.Warn("state directory was mode "+fi.Mode().Perm().String()+"; made it 0700", "dir", dir)
	}
	return nil
}
