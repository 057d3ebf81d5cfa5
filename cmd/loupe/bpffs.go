package main

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"loupe/internal/cli"
)

// mountBpffsCmd mounts a bpf file system where the host has none, so that
// the agent can pin its links and tables there (pin_dir). It is the
// deployment's init step: mounting takes CAP_SYS_ADMIN, which the agent
// itself runs without, so it is a command of its own that an init
// container (or a unit's privileged ExecStartPre) runs before the agent,
// from the same binary and image.
func mountBpffsCmd(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("mount-bpffs", "[--path DIR]", stdout, stderr)
	dir := fs.String("path", "/sys/fs/bpf", "where to mount the bpf file system; left alone if one is mounted there already")
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	mounted, err := mountBpffs(*dir)
	if err != nil {
		return err
	}
	if mounted {
		fmt.Fprintf(stdout, "mounted a bpf file system on %s\n", *dir)
	} else {
		fmt.Fprintf(stdout, "a bpf file system is mounted on %s already\n", *dir)
	}
	return nil
}

// mountBpffs mounts a bpf file system on dir (created if missing) unless
// dir is on one already; it reports whether it mounted. The mode is 0700,
// as systemd mounts /sys/fs/bpf: pins are readable by root alone.
func mountBpffs(dir string) (bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", dir, err)
	}
	if uint32(st.Type) == unix.BPF_FS_MAGIC {
		return false, nil
	}
	if err := unix.Mount("bpf", dir, "bpf", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700"); err != nil {
		return false, fmt.Errorf("mount a bpf file system on %s (needs CAP_SYS_ADMIN): %w", dir, err)
	}
	return true, nil
}
