#!/bin/sh
# Installs the Anvil agent on a Linux GPU server (Debian, Ubuntu) as a systemd service, from the control
# plane that serves this script:
#
#   curl -fsSL https://anvil.example.com/install.sh | sudo sh -s -- --join-token <token>
#
# It downloads the agent artifact for this machine's architecture (the agent bundled with its own
# Node.js runtime: no checkout, no npm, no Node.js from the distribution), checks its SHA-256, unpacks it
# into <prefix>/versions/<version>, points <prefix>/current at it and runs it under systemd. The agent
# upgrades itself the same way when the control plane asks. See installer/README.md.
#
# POSIX sh: piped into `sh`, it runs under dash on Debian and Ubuntu.
set -eu

# Filled in by the control plane when it serves this file (GET /install.sh).
DEFAULT_CONTROL_PLANE=''
DEFAULT_VERSION=''

PROG=anvil-install
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
say() { printf '%s: %s\n' "$PROG" "$*"; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }

CONTROL_PLANE="${ANVIL_CONTROL_PLANE:-$DEFAULT_CONTROL_PLANE}"
JOIN_TOKEN="${ANVIL_JOIN_TOKEN:-}"
VERSION="$DEFAULT_VERSION"
ROOT=""
PREFIX=/opt/anvil-agent
STATE_DIR=/var/lib/anvil-agent
CONFIG_DIR=/etc/anvil
VOLUME_ROOT=""
SIMULATE_GPUS=""
ALLOW_INSECURE=0
SKIP_PACKAGES=0
START=1

usage() {
  cat <<'EOF'
Usage: curl -fsSL https://<control plane>/install.sh | sudo sh -s -- --join-token <token> [options]

  --join-token <token>    one-time join token (or ANVIL_JOIN_TOKEN); not needed when re-installing
                          over a registered agent (its credential in the state directory is kept)
  --control-plane <url>   the control plane (default: the one that served this script)
  --version <version>     agent version to install (default: the fleet's, as the control plane says)
  --prefix <dir>          where artifacts are unpacked (default /opt/anvil-agent)
  --state-dir <dir>       agent state: credential, log cursors (default /var/lib/anvil-agent)
  --volume-root <dir>     per-workload volumes (default <state-dir>/volumes)
  --simulate-gpus <spec>  declare GPUs on a machine without NVIDIA GPUs (development only), e.g. 2xH100
  --allow-insecure-control-plane
                          accept an http:// control plane that is not on loopback (credentials then
                          cross the network in clear text)
  --no-start              write everything but do not enable or start the service
  --skip-packages         do not install Docker with apt-get when it is missing
  --root <dir>            stage into <dir> instead of / (packaging, tests); implies --no-start and
                          --skip-packages
  -h, --help              this text
EOF
}

need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --join-token) need_value "$@"; JOIN_TOKEN="$2"; shift 2 ;;
    --control-plane) need_value "$@"; CONTROL_PLANE="$2"; shift 2 ;;
    --version) need_value "$@"; VERSION="$2"; shift 2 ;;
    --prefix) need_value "$@"; PREFIX="$2"; shift 2 ;;
    --state-dir) need_value "$@"; STATE_DIR="$2"; shift 2 ;;
    --volume-root) need_value "$@"; VOLUME_ROOT="$2"; shift 2 ;;
    --simulate-gpus) need_value "$@"; SIMULATE_GPUS="$2"; shift 2 ;;
    --allow-insecure-control-plane) ALLOW_INSECURE=1; shift ;;
    --no-start) START=0; shift ;;
    --skip-packages) SKIP_PACKAGES=1; shift ;;
    --root) need_value "$@"; ROOT="$2"; START=0; SKIP_PACKAGES=1; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
done

# ---- validate before touching anything
[ -n "$CONTROL_PLANE" ] || die "--control-plane <url> is required (this copy was not served by a control plane)"
printf '%s' "$CONTROL_PLANE" | grep -Eq '^(https?|wss?)://[^/[:space:]]+/*$' \
  || die "--control-plane must be an http(s):// or ws(s):// URL without a path, got \"$CONTROL_PLANE\""
[ -n "$VERSION" ] || die "--version <version> is required (this copy was not served by a control plane)"
printf '%s' "$VERSION" | grep -Eq '^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$' || die "--version looks wrong: \"$VERSION\""
for dir in "$PREFIX" "$STATE_DIR" "$CONFIG_DIR" ${VOLUME_ROOT:+"$VOLUME_ROOT"}; do
  case "$dir" in /*) ;; *) die "paths must be absolute, got \"$dir\"" ;; esac
done
[ -z "$SIMULATE_GPUS" ] || printf '%s' "$SIMULATE_GPUS" | grep -Eq '^[0-9]+x[A-Za-z0-9]+$' \
  || die "--simulate-gpus must look like 2xH100, got \"$SIMULATE_GPUS\""
[ -z "$JOIN_TOKEN" ] || printf '%s' "$JOIN_TOKEN" | grep -Eq '^[A-Za-z0-9_-]+$' || die "--join-token looks wrong"
case "$(uname -s)" in Linux) ;; *) die "Linux required, this is $(uname -s)" ;; esac
case "$(uname -m)" in
  x86_64|amd64) ARCH=x64 ;;
  aarch64|arm64) ARCH=arm64 ;;
  *) die "no agent artifact for architecture $(uname -m) (x86_64 and aarch64 are built)" ;;
esac
for tool in curl tar gzip sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (apt-get install curl ca-certificates)"
done
if [ -n "$ROOT" ]; then
  mkdir -p "$ROOT"
  ROOT="$(cd "$ROOT" && pwd)"
elif [ "$(id -u)" -ne 0 ]; then
  die "run as root (sudo), or stage into a directory with --root"
fi
R() { printf '%s%s' "$ROOT" "$1"; }
if [ -z "$JOIN_TOKEN" ] && [ ! -f "$(R "$STATE_DIR")/credential.json" ]; then
  die "--join-token is required for a first install (no credential in $STATE_DIR)"
fi
BASE="$(printf '%s' "$CONTROL_PLANE" | sed -e 's#^ws://#http://#' -e 's#^wss://#https://#' -e 's#/*$##')"

# ---- Docker: the agent runs containers with the machine's engine
if [ "$SKIP_PACKAGES" -eq 0 ]; then
  if ! command -v dockerd >/dev/null 2>&1 && [ ! -S /var/run/docker.sock ]; then
    [ -r /etc/os-release ] || die "no Docker engine, and no /etc/os-release to know how to install one"
    # shellcheck disable=SC1091
    . /etc/os-release
    case " ${ID:-} ${ID_LIKE:-} " in
      *" debian "*|*" ubuntu "*) ;;
      *) die "no Docker engine: install Docker and run again (${PRETTY_NAME:-unknown system})" ;;
    esac
    say "installing docker.io"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
  fi
  if [ -d /run/systemd/system ]; then systemctl enable --now docker >/dev/null 2>&1 || true; fi
fi

# ---- GPUs: the NVIDIA driver and container runtime are the operator's (vendor repositories)
if [ -z "$SIMULATE_GPUS" ] && [ -z "$ROOT" ]; then
  if [ -e /proc/driver/nvidia/version ] || command -v nvidia-smi >/dev/null 2>&1; then
    if ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia; then
      warn "NVIDIA driver found but Docker has no nvidia runtime: install nvidia-container-toolkit and run 'nvidia-ctk runtime configure --runtime=docker'"
    fi
  else
    warn "no NVIDIA driver found: this host will offer no GPUs (use --simulate-gpus only for development)"
  fi
fi

# ---- the artifact: download, check its SHA-256, unpack into its own directory, switch `current`
FILE="anvil-agent-$VERSION-linux-$ARCH.tar.gz"
URL="$BASE/agent/artifacts/$VERSION/$FILE"
VERSIONS="$(R "$PREFIX")/versions"
mkdir -p "$VERSIONS"
TMP="$(mktemp -d "$VERSIONS/.install-XXXXXX")"
trap 'rm -rf "$TMP"' EXIT INT TERM
say "downloading $URL"
curl -fsSL -o "$TMP/$FILE.sha256" "$URL.sha256" || die "could not fetch $URL.sha256"
curl -fsSL -o "$TMP/$FILE" "$URL" || die "could not fetch $URL"
(cd "$TMP" && sha256sum -c --status "$FILE.sha256") \
  || die "SHA-256 of $FILE does not match $URL.sha256: not installing it"
mkdir "$TMP/unpacked"
tar -xzf "$TMP/$FILE" -C "$TMP/unpacked" --no-same-owner || die "could not unpack $FILE"
[ "$(cat "$TMP/unpacked/VERSION" 2>/dev/null)" = "$VERSION" ] || die "$FILE is not version $VERSION"
rm -rf "$VERSIONS/$VERSION"
mv "$TMP/unpacked" "$VERSIONS/$VERSION"
ln -sfn "versions/$VERSION" "$(R "$PREFIX")/.current-new"
mv -T "$(R "$PREFIX")/.current-new" "$(R "$PREFIX")/current"
say "agent $VERSION unpacked into $PREFIX/versions/$VERSION"

# ---- configuration: secrets in an environment file only root reads
mkdir -p "$(R "$CONFIG_DIR")" "$(R "$STATE_DIR")"
chmod 0700 "$(R "$STATE_DIR")"
ENV_FILE="$(R "$CONFIG_DIR")/agent.env"
umask 077
{
  echo "# Written by install.sh; read by anvil-agent.service. Add ANVIL_* settings (agent/README.md) here."
  echo "ANVIL_CONTROL_PLANE=$CONTROL_PLANE"
  echo "ANVIL_STATE_DIR=$STATE_DIR"
  echo "ANVIL_INSTALL_DIR=$PREFIX"
  [ -z "$JOIN_TOKEN" ] || echo "ANVIL_JOIN_TOKEN=$JOIN_TOKEN"
  [ -z "$VOLUME_ROOT" ] || echo "ANVIL_VOLUME_ROOT=$VOLUME_ROOT"
  [ -z "$SIMULATE_GPUS" ] || echo "ANVIL_SIMULATE_GPUS=$SIMULATE_GPUS"
  [ "$ALLOW_INSECURE" -eq 0 ] || echo "ANVIL_ALLOW_INSECURE_CONTROL_PLANE=true"
} >"$ENV_FILE.new"
chmod 0600 "$ENV_FILE.new"
mv "$ENV_FILE.new" "$ENV_FILE"
umask 022

UNIT="$(R /etc/systemd/system)/anvil-agent.service"
mkdir -p "$(dirname "$UNIT")"
cat >"$UNIT" <<EOF
[Unit]
Description=Anvil agent: runs this GPU server's containers for the Anvil control plane
After=network-online.target docker.service
Wants=network-online.target
Requires=docker.service

[Service]
Type=simple
EnvironmentFile=$CONFIG_DIR/agent.env
WorkingDirectory=$PREFIX
# Through the current link: an upgrade switches it, exits, and systemd starts the new version.
ExecStart=$PREFIX/current/bin/node $PREFIX/current/lib/agent.mjs
Restart=always
RestartSec=5
# Exit 1: refused by the control plane (bad or used-up join token, revoked credential); exit 2: bad
# configuration. Restarting cannot fix either, so systemd stops instead of looping.
RestartPreventExitStatus=1 2
# Containers belong to dockerd and keep running while the agent restarts or upgrades.
KillMode=process
TimeoutStopSec=30

[Install]
WantedBy=multi-user.target
EOF

if [ "$START" -eq 1 ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  systemctl enable anvil-agent.service >/dev/null
  systemctl restart anvil-agent.service
  say "anvil-agent $VERSION started: follow it with 'journalctl -u anvil-agent -f'"
elif [ "$START" -eq 1 ]; then
  say "no systemd here: run the unit's ExecStart with its environment file, e.g."
  say "  sh -c 'set -a; . $CONFIG_DIR/agent.env; exec $PREFIX/current/bin/node $PREFIX/current/lib/agent.mjs'"
else
  say "staged; start it with 'systemctl daemon-reload && systemctl enable --now anvil-agent'"
fi
