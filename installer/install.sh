#!/usr/bin/env bash
# Installs the Anvil agent on a Debian or Ubuntu GPU server as a systemd service.
#
#   sudo installer/install.sh --control-plane https://anvil.example.com --join-token jt_...
#
# Run it from an Anvil checkout (or an unpacked release): the agent's sources are copied from there
# (--source), its npm dependencies installed from the npm registry, Docker from the distribution's
# packages, and the agent is built into one JavaScript file that systemd runs with plain node. See
# installer/README.md for every option and what each step does.
set -euo pipefail

PROG=anvil-install
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
say() { printf '%s: %s\n' "$PROG" "$*"; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }

SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT=""
PREFIX=/opt/anvil-agent
STATE_DIR=/var/lib/anvil-agent
CONFIG_DIR=/etc/anvil
CONTROL_PLANE=""
JOIN_TOKEN="${ANVIL_JOIN_TOKEN:-}"
SIMULATE_GPUS=""
VOLUME_ROOT=""
SKIP_PACKAGES=0
SKIP_NPM=0
START=1
NODE_BIN=""

usage() {
  cat <<'EOF'
Usage: install.sh --control-plane <url> [--join-token <token>] [options]

  --control-plane <url>   control plane URL the agent dials (http(s)://host[:port]); required
  --join-token <token>    one-time join token (or ANVIL_JOIN_TOKEN); not needed when re-installing
                          over a registered agent (its credential in the state directory is kept)
  --source <dir>          Anvil checkout to install from (default: the one holding this script)
  --prefix <dir>          where the agent is installed (default /opt/anvil-agent)
  --state-dir <dir>       agent state: credential, log cursors (default /var/lib/anvil-agent)
  --volume-root <dir>     per-workload volumes (default <state-dir>/volumes)
  --simulate-gpus <spec>  declare GPUs on a machine without NVIDIA GPUs (development only), e.g. 2xH100
  --no-start              write everything but do not enable or start the service
  --skip-packages         do not install Debian packages (Docker, Node.js) with apt-get
  --skip-npm              do not install npm dependencies (the prefix must already have them: the
                          agent is built with them)
  --root <dir>            stage into <dir> instead of / (packaging and tests); implies --no-start
                          and --skip-packages
  -h, --help              this text
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --control-plane) CONTROL_PLANE="${2:-}"; shift 2 ;;
    --join-token) JOIN_TOKEN="${2:-}"; shift 2 ;;
    --source) SOURCE="${2:-}"; shift 2 ;;
    --prefix) PREFIX="${2:-}"; shift 2 ;;
    --state-dir) STATE_DIR="${2:-}"; shift 2 ;;
    --volume-root) VOLUME_ROOT="${2:-}"; shift 2 ;;
    --simulate-gpus) SIMULATE_GPUS="${2:-}"; shift 2 ;;
    --no-start) START=0; shift ;;
    --skip-packages) SKIP_PACKAGES=1; shift ;;
    --skip-npm) SKIP_NPM=1; shift ;;
    --root) ROOT="${2:-}"; START=0; SKIP_PACKAGES=1; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
done

# ---- validate before touching anything
[ -n "$CONTROL_PLANE" ] || die "--control-plane <url> is required"
[[ "$CONTROL_PLANE" =~ ^(https?|wss?)://[^/[:space:]]+(/.*)?$ ]] \
  || die "--control-plane must be an http(s):// or ws(s):// URL, got \"$CONTROL_PLANE\""
for dir in "$PREFIX" "$STATE_DIR" "$CONFIG_DIR"; do
  [[ "$dir" == /* ]] || die "paths must be absolute, got \"$dir\""
done
[ -z "$VOLUME_ROOT" ] || [[ "$VOLUME_ROOT" == /* ]] || die "--volume-root must be absolute"
[ -z "$SIMULATE_GPUS" ] || [[ "$SIMULATE_GPUS" =~ ^[0-9]+x[A-Za-z0-9]+$ ]] \
  || die "--simulate-gpus must look like 2xH100, got \"$SIMULATE_GPUS\""
[ -f "$SOURCE/agent/src/main.ts" ] && [ -f "$SOURCE/shared/package.json" ] \
  || die "--source $SOURCE is not an Anvil checkout (agent/src/main.ts missing)"
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

# ---- packages: Docker engine and Node.js >= 20.19 from the distribution
node_ok() {
  local v
  v="$("$1" -p 'process.versions.node' 2>/dev/null)" || return 1
  local major minor
  major="${v%%.*}"; minor="${v#*.}"; minor="${minor%%.*}"
  [ "$major" -gt 20 ] || { [ "$major" -eq 20 ] && [ "$minor" -ge 19 ]; }
}

if [ "$SKIP_PACKAGES" -eq 0 ]; then
  [ -r /etc/os-release ] || die "cannot read /etc/os-release: Debian or Ubuntu required"
  # shellcheck disable=SC1091
  . /etc/os-release
  case " ${ID:-} ${ID_LIKE:-} " in
    *" debian "*|*" ubuntu "*) ;;
    *) die "Debian or Ubuntu required, found ${PRETTY_NAME:-unknown}" ;;
  esac
  missing=()
  command -v docker >/dev/null 2>&1 || missing+=(docker.io)
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends ca-certificates "${missing[@]}" >/dev/null
  fi
  command -v systemctl >/dev/null 2>&1 && systemctl enable --now docker >/dev/null 2>&1 || true
fi

NODE_BIN="$(command -v node || true)"
[ -n "$NODE_BIN" ] || die "node not found: install Node.js 20.19 or newer"
node_ok "$NODE_BIN" || die "Node.js $("$NODE_BIN" -v) is too old: 20.19 or newer is required (the distribution's package may be older; install a current Node.js and run again)"

# ---- GPUs: the NVIDIA driver and container runtime are the operator's (they need the vendor's repositories)
if [ -z "$SIMULATE_GPUS" ] && [ -z "$ROOT" ]; then
  if [ -e /proc/driver/nvidia/version ] || command -v nvidia-smi >/dev/null 2>&1; then
    if ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia; then
      warn "NVIDIA driver found but Docker has no nvidia runtime: install nvidia-container-toolkit and run 'nvidia-ctk runtime configure --runtime=docker'"
    fi
  else
    warn "no NVIDIA driver found: this host will offer no GPUs (use --simulate-gpus only for development)"
  fi
fi

# ---- the agent: sources and dependencies under the prefix
say "installing the agent into $(R "$PREFIX")"
mkdir -p "$(R "$PREFIX")"
for part in shared agent; do
  rm -rf "$(R "$PREFIX")/$part.new"
  mkdir -p "$(R "$PREFIX")/$part.new"
  cp "$SOURCE/$part/package.json" "$(R "$PREFIX")/$part.new/"
  cp -R "$SOURCE/$part/src" "$(R "$PREFIX")/$part.new/"
  [ ! -d "$SOURCE/$part/scripts" ] || cp -R "$SOURCE/$part/scripts" "$(R "$PREFIX")/$part.new/"
  # Tests and test data are not needed on a server.
  find "$(R "$PREFIX")/$part.new/src" \( -name '*.test.ts' -o -name testdata \) -prune -exec rm -rf {} +
  rm -rf "$(R "$PREFIX")/$part"
  mv "$(R "$PREFIX")/$part.new" "$(R "$PREFIX")/$part"
done
cp "$SOURCE/tsconfig.base.json" "$(R "$PREFIX")/" 2>/dev/null || true
# A workspace of just the two packages the agent needs; no scripts run at install.
cat >"$(R "$PREFIX")/package.json" <<'EOF'
{
  "name": "anvil-agent-install",
  "private": true,
  "type": "module",
  "workspaces": ["shared", "agent"]
}
EOF
if [ "$SKIP_NPM" -eq 0 ]; then
  say "installing npm dependencies"
  (cd "$(R "$PREFIX")" && npm install --omit=dev --no-audit --no-fund --loglevel=error >/dev/null) \
    || die "npm install failed in $(R "$PREFIX")"
fi

# ---- build: one plain JavaScript file, so the service runs without the TypeScript loader (tsx), whose
# loader thread would cost it about 30 MB of memory for as long as it runs
say "building the agent"
(cd "$(R "$PREFIX")" && "$NODE_BIN" --import tsx agent/scripts/build.ts >/dev/null) \
  || die "building the agent failed in $(R "$PREFIX") (its npm dependencies must be installed there)"

# ---- configuration: secrets in an environment file only root reads
mkdir -p "$(R "$CONFIG_DIR")" "$(R "$STATE_DIR")"
chmod 0700 "$(R "$STATE_DIR")"
ENV_FILE="$(R "$CONFIG_DIR")/agent.env"
umask 077
{
  echo "# Written by installer/install.sh; read by anvil-agent.service."
  echo "ANVIL_CONTROL_PLANE=$CONTROL_PLANE"
  echo "ANVIL_STATE_DIR=$STATE_DIR"
  [ -z "$JOIN_TOKEN" ] || echo "ANVIL_JOIN_TOKEN=$JOIN_TOKEN"
  [ -z "$VOLUME_ROOT" ] || echo "ANVIL_VOLUME_ROOT=$VOLUME_ROOT"
  [ -z "$SIMULATE_GPUS" ] || echo "ANVIL_SIMULATE_GPUS=$SIMULATE_GPUS"
} >"$ENV_FILE.new"
chmod 0600 "$ENV_FILE.new"
mv "$ENV_FILE.new" "$ENV_FILE"
umask 022

UNIT="$(R /etc/systemd/system)/anvil-agent.service"
mkdir -p "$(dirname "$UNIT")"
cat >"$UNIT" <<EOF
[Unit]
Description=Anvil agent: runs this GPU server's containers for the Anvil control plane
Documentation=file://$PREFIX/agent/README.md
After=network-online.target docker.service
Wants=network-online.target
Requires=docker.service

[Service]
Type=simple
EnvironmentFile=$CONFIG_DIR/agent.env
WorkingDirectory=$PREFIX
ExecStart=$NODE_BIN $PREFIX/agent/dist/main.js
# Exit 1: refused by the control plane (bad or used-up join token, revoked credential); exit 2: bad
# configuration. Restarting cannot fix either, so systemd stops instead of looping.
Restart=on-failure
RestartSec=5
RestartPreventExitStatus=1 2
# Containers belong to dockerd and keep running while the agent restarts.
KillMode=process
TimeoutStopSec=30

[Install]
WantedBy=multi-user.target
EOF

if [ "$START" -eq 1 ]; then
  systemctl daemon-reload
  systemctl enable anvil-agent.service >/dev/null
  systemctl restart anvil-agent.service
  say "anvil-agent started: follow it with 'journalctl -u anvil-agent -f'"
else
  say "staged; start it with 'systemctl daemon-reload && systemctl enable --now anvil-agent'"
fi
