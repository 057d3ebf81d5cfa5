package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildLoupe builds the real agent as scripts/build.sh does (static, no
// cgo), into a temporary directory.
func buildLoupe(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "loupe")
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", out, "./cmd/loupe")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/loupe: %v\n%s", err, b)
	}
	return out
}

func digestOf(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// treeSums is the SHA-256 of every file under dir, by relative path.
func treeSums(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	sums := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sums[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// TestImage builds the image of the real binary twice, checks that both
// builds and both sets of files are identical, then reads what was written
// back with go-containerregistry and checks its contents and configuration
// against what deploy/README.md documents.
func TestImage(t *testing.T) {
	bin := buildLoupe(t)
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	opts := Options{Binary: bin, Created: created, Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567", Source: "https://example.com/loupe"}

	dir := t.TempDir()
	var digests []v1.Hash
	for _, run := range []string{"a", "b"} {
		img, err := Build(opts)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, digestOf(t, img))
		if err := WriteLayout(img, filepath.Join(dir, run, "oci"), "loupe:v1.2.3"); err != nil {
			t.Fatal(err)
		}
		if err := WriteTarball(img, filepath.Join(dir, run, "loupe.tar"), "loupe:v1.2.3"); err != nil {
			t.Fatal(err)
		}
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds of the same binary: digests %s and %s", digests[0], digests[1])
	}
	a, b := treeSums(t, filepath.Join(dir, "a")), treeSums(t, filepath.Join(dir, "b"))
	if !maps.Equal(a, b) {
		t.Fatalf("two builds wrote different files:\n%v\n%v", a, b)
	}
	// The time is part of what is fixed: another time, another digest.
	later := opts
	later.Created = created.Add(time.Second)
	if img, err := Build(later); err != nil {
		t.Fatal(err)
	} else if digestOf(t, img) == digests[0] {
		t.Fatal("a build with another creation time has the same digest")
	}

	// Read back: the layout's index names the image, and the docker-load
	// tar holds the same image.
	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "a", "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations[refNameAnnotation] != "loupe:v1.2.3" || im.Manifests[0].Digest != digests[0] {
		t.Fatalf("layout index: %+v, want one manifest %s named loupe:v1.2.3", im.Manifests, digests[0])
	}
	img, err := idx.Image(digests[0])
	if err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(filepath.Join(dir, "a", "loupe.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfgFromTar, err := fromTar.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfgRaw, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cfgFromTar, cfgRaw) {
		t.Fatal("the docker-load tar holds another configuration than the layout")
	}

	checkManifest(t, img)
	checkLayer(t, img, bin, created)
	checkConfig(t, img, created)
}

func checkManifest(t *testing.T, img v1.Image) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("media types: manifest %s, config %s; want OCI's", m.MediaType, m.Config.MediaType)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Fatalf("layers: %+v, want exactly one %s", m.Layers, types.OCILayer)
	}
}

// checkLayer checks that the one layer holds the binary, executable, at
// BinaryPath, and nothing but its directories.
func checkLayer(t *testing.T, img v1.Image, bin string, created time.Time) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var got []byte
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(created) {
			t.Errorf("%s: owner %d:%d (%q:%q), time %s; want 0:0 without names, %s", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, created)
		}
		if "/"+h.Name != BinaryPath {
			continue
		}
		if h.Typeflag != tar.TypeReg || h.Mode != 0o755 {
			t.Errorf("%s: type %c mode %04o, want a regular file 0755", h.Name, h.Typeflag, h.Mode)
		}
		if got, err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	if wantNames := []string{"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/loupe"}; !slices.Equal(names, wantNames) {
		t.Errorf("layer entries %q, want %q", names, wantNames)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the layer's %s (%d bytes) is not the binary built (%d bytes)", BinaryPath, len(got), len(want))
	}
	f, err := elf.NewFile(bytes.NewReader(got))
	if err != nil {
		t.Fatalf("%s is not ELF: %v", BinaryPath, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s names a program interpreter: not static", BinaryPath)
		}
	}
}

func checkConfig(t *testing.T, img v1.Image, created time.Time) {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	if !cfg.Created.Time.Equal(created) || len(cfg.History) != 1 || !cfg.History[0].Created.Time.Equal(created) {
		t.Errorf("created %s, history %+v; want %s", cfg.Created, cfg.History, created)
	}
	c := cfg.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/loupe", "run"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/usr/local/bin/loupe run] and no cmd", c.Entrypoint, c.Cmd)
	}
	if c.User != "0:0" || !slices.Equal(c.Env, []string{"PATH=/usr/local/bin"}) {
		t.Errorf("user %q env %q, want 0:0 and PATH=/usr/local/bin", c.User, c.Env)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":       "loupe",
		"org.opencontainers.image.description": Description,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     "2026-01-02T03:04:05Z",
		"org.opencontainers.image.version":     "v1.2.3",
		"org.opencontainers.image.revision":    "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.source":      "https://example.com/loupe",
	}
	if !maps.Equal(c.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", c.Labels, wantLabels)
	}
	if cfg.RootFS.Type != "layers" || len(cfg.RootFS.DiffIDs) != 1 {
		t.Errorf("rootfs %+v, want one layer", cfg.RootFS)
	}
}

// TestBuildRefusesWhatCannotRun: the image has no libc and no loader, so
// a dynamically linked binary, or no ELF at all, is refused at build time
// rather than failing when the container starts.
func TestBuildRefusesWhatCannotRun(t *testing.T) {
	script := filepath.Join(t.TempDir(), "loupe")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho loupe\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(Options{Binary: script}); err == nil {
		t.Error("a shell script was accepted as the binary")
	}
	// /bin/ls is dynamically linked on every distribution this runs on.
	if _, err := os.Stat("/bin/ls"); err != nil {
		t.Skip("no /bin/ls")
	}
	if _, err := Build(Options{Binary: "/bin/ls"}); !errors.Is(err, errNotStatic) {
		t.Errorf("a dynamically linked binary: %v, want %v", err, errNotStatic)
	}
}
