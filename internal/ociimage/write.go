package ociimage

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// refNameAnnotation names an image of an OCI layout's index: skopeo, podman
// and crane find it by this name (oci:DIR:TAG).
const refNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes img as an OCI image layout in dir, replacing whatever
// the directory held, with tag as the image's reference name. The layout is
// what registries' tools copy from (`skopeo copy oci:DIR:TAG docker://...`,
// `crane push DIR`), and what `podman load` and Docker 25+ load from a tar.
func WriteLayout(img v1.Image, dir, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("oci layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: tag})); err != nil {
		return fmt.Errorf("oci layout %s: %w", dir, err)
	}
	return nil
}

// WriteTarball writes img to file as the tar that `docker load` and
// `podman load` read, tagged ref (e.g. loupe:v1.2.3).
func WriteTarball(img v1.Image, file, ref string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}
