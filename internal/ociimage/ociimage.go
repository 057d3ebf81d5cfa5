// Package ociimage builds Loupe's OCI image without a container runtime:
// one layer holding the static loupe binary and nothing else (no shell, no
// libc, no package manager), and an image configuration that runs
// `loupe run`. Everything that goes into the image is fixed by the binary
// and Options, so two builds of the same binary give the same digest: the
// tar entries carry the creation time, owner 0 and fixed modes, gzip has
// no time stamp, and the configuration's times are Options.Created.
//
// The DaemonSet (deploy/helm/loupe) and `docker run` use the same image;
// other subcommands run through the binary's path (`kubectl exec POD --
// loupe status`, the bpffs init container's `loupe mount-bpffs`).
package ociimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image holds and runs; deploy/README.md documents them.
const (
	// BinaryPath is where the binary is, on the image's PATH.
	BinaryPath = "/usr/local/bin/loupe"
	// User is root: the agent needs CAP_BPF, CAP_NET_ADMIN and
	// CAP_PERFMON in its effective set, which Kubernetes grants a
	// non-root process only through file capabilities, and those are
	// ignored under no_new_privs (allowPrivilegeEscalation: false). The
	// deployment drops every other capability.
	User = "0:0"
	// Title is the image's org.opencontainers.image.title.
	Title = "loupe"
	// Description is its org.opencontainers.image.description.
	Description = "Loupe: an eBPF network observability agent (exact flow records from the TC/TCX hooks)"
	// Licenses is its org.opencontainers.image.licenses (LICENSE).
	Licenses = "Apache-2.0"
)

// Entrypoint is what the image runs: arguments given to the container
// (`docker run IMAGE --iface eth0`) are loupe run's flags.
var Entrypoint = []string{BinaryPath, "run"}

// Options are what varies between builds.
type Options struct {
	// Binary is the static loupe binary (scripts/build.sh).
	Binary string
	// Created is the image's creation time, and the time of its files:
	// fixed (the commit's time, SOURCE_DATE_EPOCH), so that a rebuild of
	// the same commit gives the same digest.
	Created time.Time
	// Version and Revision are the build's version and commit, for the
	// org.opencontainers.image.version and .revision labels ("": left out).
	Version, Revision string
	// Source is the repository's URL, for org.opencontainers.image.source
	// ("": left out).
	Source string
}

// Labels returns the image's labels: the OCI annotation keys
// (org.opencontainers.image.*), as `docker inspect` shows them.
func (o Options) Labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       Title,
		"org.opencontainers.image.description": Description,
		"org.opencontainers.image.licenses":    Licenses,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   o.Source,
	} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

// Build builds the image in memory.
func Build(o Options) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	arch, err := staticELF(bin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Binary, err)
	}
	layerTar, err := binaryLayer(bin, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created.UTC()}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "loupe-image: COPY loupe " + BinaryPath, Comment: "the static loupe binary"},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = created
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Config = v1.Config{
		Entrypoint: Entrypoint,
		Env:        []string{"PATH=" + path.Dir(BinaryPath)},
		User:       User,
		WorkingDir: "/",
		Labels:     o.Labels(),
		StopSignal: "SIGTERM",
	}
	return mutate.ConfigFile(img, cfg)
}

// binaryLayer is the layer's tar: the directories down to BinaryPath and
// the binary, every entry owned by 0:0 and dated t.
func binaryLayer(bin []byte, t time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	rel := strings.TrimPrefix(BinaryPath, "/")
	var dirs []string
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		dirs = append([]string{d + "/"}, dirs...)
	}
	t = t.UTC()
	hdr := func(name string, typ byte, mode, size int64) *tar.Header {
		// PAX, so that the times are exact whatever they are; no user or
		// group names, which would differ between build hosts.
		return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size, ModTime: t, AccessTime: t, ChangeTime: t, Format: tar.FormatPAX}
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(hdr(d, tar.TypeDir, 0o755, 0)); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(hdr(rel, tar.TypeReg, 0o755, int64(len(bin)))); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// errNotStatic says the binary would not run in an image without libc.
var errNotStatic = errors.New("not a static executable: it names a program interpreter (build it with CGO_ENABLED=0, as scripts/build.sh does)")

// staticELF checks that bin is an ELF executable without a program
// interpreter (PT_INTERP), which the image could not provide, and returns
// its architecture as OCI names it.
func staticELF(bin []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("not an executable (ELF type %s)", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", errNotStatic
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	}
	return "", fmt.Errorf("machine %s: not an architecture Loupe builds for", f.Machine)
}
