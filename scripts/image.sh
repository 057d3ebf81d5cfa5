#!/usr/bin/env bash
# Builds Loupe's OCI image without a container runtime (cmd/loupe-image,
# internal/ociimage): bin/loupe through scripts/build.sh, then one layer
# with that binary alone, written as an OCI image layout and as a tar that
# `docker load` and `podman load` read:
#
#   bin/image/oci/        OCI layout (skopeo copy oci:bin/image/oci:TAG ...)
#   bin/image/loupe.tar   docker load -i bin/image/loupe.tar
#
# Reproducible: the creation time is SOURCE_DATE_EPOCH if set, else the
# commit's time, so building the same commit again gives the same digest
# (a checkout with uncommitted changes is stamped as modified, and its
# binary differs anyway). The tag is loupe:<version> (scripts/version.sh);
# LOUPE_IMAGE_SOURCE sets the org.opencontainers.image.source label.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/version.sh
out=${LOUPE_IMAGE_DIR:-bin/image}
created=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
./scripts/build.sh bin/loupe
image_version=$version
if [[ $modified == true ]]; then
	image_version=$version-dirty
fi
go run ./cmd/loupe-image -binary bin/loupe -created "$created" \
	-version "$image_version" -revision "$commit" -source "${LOUPE_IMAGE_SOURCE:-}" \
	-layout "$out/oci" -tar "$out/loupe.tar"
