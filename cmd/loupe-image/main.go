// Command loupe-image builds Loupe's OCI image from a static loupe binary,
// without a container runtime, reproducibly: the same binary and flags give
// the same digest (internal/ociimage). `make image` runs it through
// scripts/image.sh, which stamps the version, commit and creation time.
//
//	loupe-image -binary bin/loupe -created 1767225600 -version v1.2.3 \
//	    -layout bin/image/oci -tar bin/image/loupe.tar
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"loupe/internal/ociimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "loupe-image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("loupe-image", flag.ContinueOnError)
	var o ociimage.Options
	fs.StringVar(&o.Binary, "binary", "bin/loupe", "the static loupe binary")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "creation time, in seconds since the epoch (default $SOURCE_DATE_EPOCH, else 0)")
	fs.StringVar(&o.Version, "version", "", "the build's version (org.opencontainers.image.version, and the tag)")
	fs.StringVar(&o.Revision, "revision", "", "the build's commit (org.opencontainers.image.revision)")
	fs.StringVar(&o.Source, "source", "", "the repository's URL (org.opencontainers.image.source)")
	layoutDir := fs.String("layout", "", "write an OCI image layout to this directory (replaced)")
	tarFile := fs.String("tar", "", "write a tar for docker load / podman load to this file")
	repo := fs.String("repository", "loupe", "repository part of the image's name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *layoutDir == "" && *tarFile == "" {
		return errors.New("nothing to write: give -layout DIR, -tar FILE or both")
	}
	secs := int64(0)
	if *created != "" {
		var err error
		if secs, err = strconv.ParseInt(*created, 10, 64); err != nil {
			return fmt.Errorf("-created %q: want seconds since the epoch", *created)
		}
	}
	o.Created = time.Unix(secs, 0).UTC()
	img, err := ociimage.Build(o)
	if err != nil {
		return err
	}
	tag := *repo + ":latest"
	if o.Version != "" {
		tag = *repo + ":" + o.Version
	}
	if *layoutDir != "" {
		if err := ociimage.WriteLayout(img, *layoutDir, tag); err != nil {
			return err
		}
	}
	if *tarFile != "" {
		if err := ociimage.WriteTarball(img, *tarFile, tag); err != nil {
			return err
		}
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", tag, digest)
	return nil
}
