#!/usr/bin/env bash
# Builds deploy/Containerfile and checks the image it makes: non-root user, `--version`,
# a start with the image's own configuration (deploy/config/container.toml) on a
# read-only root file system with the embedded store on a volume, the HEALTHCHECK
# (`portcullis health`) healthy, the published port answering gRPC health from outside
# the container, the probe failing against a port nothing serves, one counted attempt,
# and a clean exit on SIGTERM.
#
# Not part of CI: it needs a container engine (podman, or docker with a running daemon).
#
#   deploy/build-image.sh [--local-bases] [TAG]
#
# --local-bases builds both base images from Debian packages instead of pulling them (for
# a machine that reaches Debian's mirrors but no container registry): the build image is a
# debootstrapped Debian 12 with gcc and the building host's Rust toolchain (`rustc --print
# sysroot`, 1.90 or newer) and the crates of Cargo.lock vendored from the building host's
# cargo cache (the build runs offline); the runtime image holds only libc6 and libgcc-s1
# (unpacked from their .deb files), the CA bundle, and a passwd entry for 65532.
#
# Environment: ENGINE (default podman, else docker), ENGINE_FLAGS (extra global flags,
# e.g. "--runtime runc"), RUN_FLAGS (extra flags for build and run, e.g. ulimits),
# BUILD_FLAGS (extra flags for the build only, e.g. --network=host),
# WORK (scratch directory, kept between runs so the Debian tree is made once),
# DEBIAN_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."

local_bases=false
if [[ "${1:-}" == "--local-bases" ]]; then
  local_bases=true
  shift
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
tag=${1:-localhost/portcullis:$version}

engine=${ENGINE:-$(command -v podman >/dev/null 2>&1 && echo podman || echo docker)}
# shellcheck disable=SC2206 # flags are meant to split
e=($engine ${ENGINE_FLAGS:-})
# shellcheck disable=SC2206
run_flags=(${RUN_FLAGS:-})
# shellcheck disable=SC2206
build_flags=(${BUILD_FLAGS:-})
work=${WORK:-${TMPDIR:-/tmp}/portcullis-image}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$work"

step() { printf '\n== %s\n' "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

build_args=()
if $local_bases; then
  rootfs=$work/rootfs
  if [[ ! -x $rootfs/usr/bin/gcc ]]; then
    step "debootstrap Debian 12 (minbase, gcc, libc6-dev, ca-certificates) into $rootfs"
    command -v debootstrap >/dev/null || fail "debootstrap is not installed (apt-get install debootstrap)"
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates \
      bookworm "$rootfs" "$mirror"
  fi

  step "build base: $rootfs + the Rust toolchain at $(rustc --print sysroot)"
  sysroot=$(rustc --print sysroot)
  rustc --version
  rm -rf "$work/build-root" && cp -a "$rootfs" "$work/build-root"
  rm -rf "$work/build-root/var/cache/apt/archives/"*.deb
  mkdir -p "$work/build-root/usr/local/rust" "$work/build-root/opt/cargo"
  # The toolchain without its documentation.
  tar -C "$sysroot" --exclude=./share/doc -c . | tar -C "$work/build-root/usr/local/rust" -x
  # The crates of Cargo.lock from the building host's cargo cache, so the build needs no
  # network (and no registry certificate) at all.
  rm -rf "$work/vendor"
  CARGO_NET_OFFLINE=true cargo vendor --locked --versioned-dirs --quiet "$work/vendor" >/dev/null
  cp -a "$work/vendor" "$work/build-root/opt/cargo/vendor"
  cat >"$work/build-root/opt/cargo/config.toml" <<'CONFIG'
[net]
offline = true
[source.crates-io]
replace-with = "vendored-sources"
[source.vendored-sources]
directory = "/opt/cargo/vendor"
CONFIG
  tar -C "$work/build-root" -c . | "${e[@]}" import \
    --change 'ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV CARGO_HOME=/opt/cargo' \
    - localhost/portcullis-build-base:bookworm >/dev/null

  step "runtime base: libc6, libgcc-s1, CA bundle, user 65532"
  rt=$work/runtime-root
  rm -rf "$rt" && mkdir -p "$rt"
  for pkg in libc6 libgcc-s1; do
    deb=$(ls "$rootfs"/var/cache/apt/archives/"${pkg}"_*.deb | head -n1)
    [[ -f $deb ]] || fail "no $pkg .deb in $rootfs/var/cache/apt/archives"
    dpkg-deb -x "$deb" "$rt"
  done
  rm -rf "$rt/usr/share/doc" "$rt/usr/share/lintian" "$rt/usr/share/locale"
  mkdir -p "$rt/etc/ssl/certs" "$rt/tmp" "$rt/home/nonroot"
  cp "$rootfs/etc/ssl/certs/ca-certificates.crt" "$rt/etc/ssl/certs/"
  chmod 1777 "$rt/tmp"
  chown 65532:65532 "$rt/home/nonroot"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rt/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$rt/etc/group"
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$rt/etc/nsswitch.conf"
  tar -C "$rt" -c . | "${e[@]}" import --change 'USER 65532:65532' \
    - localhost/portcullis-runtime-base:bookworm >/dev/null

  build_args=(--build-arg RUST_IMAGE=localhost/portcullis-build-base:bookworm
    --build-arg RUNTIME_IMAGE=localhost/portcullis-runtime-base:bookworm)
fi

step "build $tag"
format=()
[[ $engine == podman* ]] && format=(--format docker) # keeps HEALTHCHECK (OCI has none)
"${e[@]}" build "${format[@]}" "${run_flags[@]}" "${build_flags[@]}" "${build_args[@]}" \
  -f deploy/Containerfile -t "$tag" .

step "checks"
user=$("${e[@]}" image inspect --format '{{.Config.User}}' "$tag")
[[ $user == 65532:65532 ]] || fail "image user is '$user', not 65532:65532"
echo "user: $user"
"${e[@]}" image inspect --format 'healthcheck: {{json .Config.Healthcheck}}' "$tag"
"${e[@]}" image inspect --format 'size: {{.Size}} bytes' "$tag"

out=$("${e[@]}" run --rm "${run_flags[@]}" "$tag" --version)
echo "--version: $out"
[[ $out == "portcullis $version" ]] || fail "--version printed '$out'"

name=portcullis-image-check-$$
volume=$name-data
cleanup() {
  "${e[@]}" rm -f "$name" >/dev/null 2>&1 || true
  "${e[@]}" volume rm -f "$volume" >/dev/null 2>&1 || true
}
trap cleanup EXIT
"${e[@]}" volume create "$volume" >/dev/null
"${e[@]}" run -d --name "$name" "${run_flags[@]}" --read-only --cap-drop=ALL \
  --security-opt no-new-privileges \
  -p 127.0.0.1::50051 -v "$volume:/var/lib/portcullis" \
  "$tag" >/dev/null

serving=""
for _ in $(seq 1 40); do
  if serving=$("${e[@]}" exec "$name" portcullis health 2>&1); then break; fi
  sleep 0.5
done
echo "portcullis health inside: $serving"
[[ $serving == SERVING ]] || { "${e[@]}" logs "$name" >&2; fail "health never answered SERVING"; }

if [[ $engine == podman* ]]; then
  "${e[@]}" healthcheck run "$name" && echo "HEALTHCHECK: healthy" || fail "HEALTHCHECK unhealthy"
else
  for _ in $(seq 1 30); do
    state=$("${e[@]}" inspect --format '{{.State.Health.Status}}' "$name")
    [[ $state == healthy ]] && break
    sleep 1
  done
  echo "HEALTHCHECK: $state"
  [[ $state == healthy ]] || fail "HEALTHCHECK $state"
fi

# From outside the container, through the published port: a port publisher accepts TCP
# connections even when nothing listens inside, so only a gRPC answer counts. The probe
# runs in a second container of the image on the host's network.
published=$("${e[@]}" port "$name" 50051/tcp | head -n1)
out=$("${e[@]}" run --rm --network host "${run_flags[@]}" "$tag" health --addr "http://$published" 2>&1) ||
  { "${e[@]}" logs "$name" >&2; fail "the published port $published does not reach the daemon: $out"; }
echo "portcullis health through the published port $published: $out"

set +e
"${e[@]}" exec "$name" portcullis health --addr http://127.0.0.1:1 --timeout 1s >/dev/null 2>&1
code=$?
set -e
echo "portcullis health against a closed port: exit $code"
[[ $code -ne 0 ]] || fail "the probe passed with nothing listening"

out=$("${e[@]}" exec "$name" portcullis attempt --realm default --identifier image-check@example.com)
echo "one attempt on the embedded store (read-only root, data on the volume): $out"
[[ $out == ALLOW ]] || fail "attempt answered '$out'"
"${e[@]}" exec "$name" sh -c true >/dev/null 2>&1 && fail "the image has a shell"
echo "no shell in the image"

"${e[@]}" stop -t 30 "$name" >/dev/null
code=$("${e[@]}" inspect --format '{{.State.ExitCode}}' "$name")
echo "exit status after SIGTERM: $code"
[[ $code == 0 ]] || { "${e[@]}" logs "$name" >&2; fail "the daemon did not stop cleanly"; }
"${e[@]}" logs "$name" 2>&1 | tail -n 5

step "image $tag: all checks passed"
