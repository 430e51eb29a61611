package rafstest

import (
	"archive/tar"
	"fmt"
	"strings"
	"time"
)

// metaLayers builds the "meta" image: modes, owners, xattrs and times.
func metaLayers() []Layer {
	big := strings.Repeat("0123456789abcdef", 125) // 2000 bytes; ext4 fits it in the inode's block
	many := text("meta/xattr-many", 0o644, "twenty xattrs\n")
	for i := range 20 {
		many = many.Xattr(fmt.Sprintf("user.k%02d", i), fmt.Sprintf("value %d", i))
	}
	l := stamp(71,
		dir("meta", 0o755),
		text("meta/setuid", 0o4755, "setuid\n"),
		text("meta/setgid", 0o2755, "setgid\n").Owner(0, 50),
		text("meta/setuid-setgid", 0o6755, "both\n").Owner(1000, 1000),
		text("meta/all-bits", 0o7777, "every permission bit\n"),
		text("meta/no-perms", 0o000, "mode 0000\n"),
		text("meta/group-write", 0o664, "0664\n"),
		text("meta/exec-only", 0o111, "0111\n"),
		dir("meta/sticky", 0o1777),
		text("meta/sticky/f", 0o644, "in a sticky directory\n"),
		dir("meta/setgid-dir", 0o2775).Owner(0, 100),
		text("meta/setgid-dir/f", 0o664, "in a setgid directory\n").Owner(0, 100),
		// A read-only directory listed before its children: an extractor must
		// apply the mode after writing them.
		dir("meta/readonly-dir", 0o555),
		text("meta/readonly-dir/child", 0o444, "in a read-only directory\n"),
		dir("meta/no-perms-dir", 0o000),
		text("meta/no-perms-dir/child", 0o644, "in a 0000 directory\n"),
		text("meta/owner-1000", 0o644, "1000:1000\n").Owner(1000, 1000).Named("someone", "somegroup"),
		text("meta/owner-nobody", 0o644, "65534:65534\n").Owner(65534, 65534),
		text("meta/owner-mixed", 0o644, "uid and gid differ\n").Owner(12345, 54321),
		text("meta/owner-big", 0o644, "ids beyond the ustar octal field\n").Owner(3000000, 4000000000),
		dir("meta/owned-dir", 0o750).Owner(1000, 1000),
		symlink("meta/owned-symlink", "owner-1000").Owner(2000, 2000),
		text("meta/xattr-file", 0o644, "xattrs\n").
			Xattr("user.foo", "bar").
			Xattr("user.empty", "").
			Xattr("user.binary", "\x00\x01\xfe\xff").
			Xattr("user.big", big).
			Xattr("trusted.foo", "trusted value"),
		dir("meta/xattr-dir", 0o755).Xattr("user.dirattr", "on a directory").Xattr("trusted.dir", "t"),
		text("meta/xattr-dir/child", 0o644, "plain child of a directory with xattrs\n"),
		symlink("meta/xattr-symlink", "xattr-file").Xattr("trusted.link", "on a symlink"),
		many,
		text("meta/old", 0o644, "mtime before 1970\n").At(time.Date(1965, time.July, 20, 20, 17, 40, 500000001, time.UTC)),
		text("meta/after-2038", 0o644, "mtime after the 32-bit rollover\n").At(time.Date(2040, time.February, 29, 1, 2, 3, 999999999, time.UTC)),
		text("meta/whole-second", 0o644, "mtime with zero nanoseconds\n").At(time.Date(2020, time.January, 1, 0, 0, 0, 0, time.UTC)),
		dir("meta/dir-old-mtime", 0o755).At(time.Date(1999, time.December, 31, 23, 59, 59, 1, time.UTC)),
		text("meta/dir-old-mtime/child", 0o644, "the parent's mtime must survive this child\n"),
	)
	return []Layer{l}
}

// deviceLayers builds the "devices" image.
func deviceLayers() []Layer {
	l := stamp(81,
		dir("dev", 0o755),
		device(tar.TypeChar, "dev/null", 0o666, 1, 3),
		device(tar.TypeChar, "dev/zero", 0o666, 1, 5),
		device(tar.TypeChar, "dev/tty", 0o620, 5, 0).Owner(0, 5),
		device(tar.TypeBlock, "dev/sda", 0o660, 8, 0).Owner(0, 6),
		device(tar.TypeBlock, "dev/nvme0n1p9", 0o660, 259, 65537).Owner(0, 6),
		device(tar.TypeChar, "dev/max", 0o600, 4095, 1048575),
		fifo("dev/fifo", 0o644),
		fifo("dev/fifo-owned", 0o600).Owner(1000, 1000),
		dir("dev/pts", 0o755),
		device(tar.TypeChar, "dev/pts/0", 0o620, 136, 0).Owner(1000, 5),
	)
	return []Layer{l}
}
