# Sourced by scripts/build.sh and scripts/image.sh: sets version, commit and
# modified for the build of the current checkout, so that the binary's stamp
# and the image's labels always agree.
#
# The version is LOUPE_VERSION if set, else the nearest v* tag (git
# describe), else a Go pseudo-version of the commit
# (v0.0.0-YYYYMMDDhhmmss-<commit>); the commit is LOUPE_COMMIT if set, else
# HEAD's; modified is "true" when tracked files differ from it. Outside a
# git checkout all three are left empty.
commit=${LOUPE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
version=${LOUPE_VERSION:-}
modified=""
if [[ -n $commit ]]; then
	if [[ -z $version ]]; then
		version=$(git describe --tags --match 'v[0-9]*' 2>/dev/null || true)
	fi
	if [[ -z $version ]]; then
		version="v0.0.0-$(TZ=UTC0 git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S "$commit")-${commit:0:12}"
	fi
	if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null | head -1) ]]; then
		modified=true
	fi
fi
