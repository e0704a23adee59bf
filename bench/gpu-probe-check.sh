#!/usr/bin/env bash
# Checks the Anvil agent's GPU probe on a real NVIDIA server (H100, H200, ...) against nvidia-smi and
# pynvml, GPU by GPU, while a short PyTorch matmul loop keeps the GPUs busy; then compiles a tiny C
# program against the server's nvml.h (when a CUDA installation has one) and compares the struct sizes
# and offsets with the table the agent's layout test (agent/src/gpu/nvml-layout.test.ts) relies on.
# Needs: bash, nvidia-smi, python3 (torch and pynvml optional: their parts are skipped and said so),
# a C compiler (optional), Node.js >= 20.19 and the agent. No Docker, no internet. Takes about 2 minutes.
#
# Usage (from the agent's tree: a checkout after `npm ci && npm run build -w @anvil/agent`, or the
# installer's /opt/anvil-agent):
#   bench/gpu-probe-check.sh [output-dir]
# Environment:
#   NODE           node binary (default: node on PATH)
#   NODE_XZ        an xz-compressed node binary (node-vXX-linux-x64/bin/node.xz): unpacked to a temp dir
#   ANVIL_AGENT    the agent's entry: agent/dist/main.js (default, the bundle) or agent/src/main.ts (tsx)
#   ANVIL_NVML_LIBRARY  libnvidia-ml path, when not the default libnvidia-ml.so.1
#   LOAD_SECONDS   how long the matmul loop runs (default 45)
#   NVML_H         a specific nvml.h to compile against
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$PWD/gpu-probe-check-$(date -u +%Y%m%dT%H%M%SZ)}"
LOAD_SECONDS="${LOAD_SECONDS:-45}"
mkdir -p "$OUT"
say() { printf '== %s\n' "$*" | tee -a "$OUT/report.txt"; }
note() { printf '   %s\n' "$*" | tee -a "$OUT/report.txt"; }
: >"$OUT/report.txt"

# ---- node
TMP="$(mktemp -d)"
LOAD_PID=""
cleanup() {
  [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
if [ -n "${NODE_XZ:-}" ]; then
  xz -dc "$NODE_XZ" >"$TMP/node" && chmod +x "$TMP/node" && NODE="$TMP/node"
fi
NODE="${NODE:-$(command -v node || true)}"
[ -x "$NODE" ] || { echo "no node: set NODE=/path/to/node or NODE_XZ=/path/to/node.xz" >&2; exit 2; }

AGENT="${ANVIL_AGENT:-$ROOT/agent/dist/main.js}"
if [ ! -f "$AGENT" ]; then echo "no agent at $AGENT (build it: npm run build -w @anvil/agent, or set ANVIL_AGENT)" >&2; exit 2; fi
AGENT_CMD=("$NODE")
case "$AGENT" in *.ts) AGENT_CMD+=(--import tsx) ;; esac
AGENT_CMD+=("$AGENT" --probe)
[ -n "${ANVIL_NVML_LIBRARY:-}" ] && AGENT_CMD+=(--nvml-library "$ANVIL_NVML_LIBRARY")
command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found" >&2; exit 2; }

say "server"
note "date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ)"
note "node: $("$NODE" --version)  agent: $AGENT"
nvidia-smi -L | sed 's/^/   /' | tee -a "$OUT/report.txt"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
note "$(grep -o 'Driver Version: [0-9.]*.*CUDA Version: [0-9.]*' "$OUT/nvidia-smi.txt" | head -1)"

# ---- load: a matmul loop on every GPU, so utilisation, power and temperature are not idle figures
HAVE_TORCH=0
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  HAVE_TORCH=1
  cat >"$TMP/load.py" <<'PY'
import sys, time, torch
seconds, ready = float(sys.argv[1]), sys.argv[2]
gpus = list(range(torch.cuda.device_count()))
mats = [torch.randn(8192, 8192, device=f"cuda:{i}", dtype=torch.bfloat16) for i in gpus]
end, warm = time.time() + seconds, False
while time.time() < end:
    for m in mats:
        m @ m
    for i in gpus:
        torch.cuda.synchronize(i)
    if not warm:
        open(ready, "w").close()
        warm = True
PY
  python3 "$TMP/load.py" "$LOAD_SECONDS" "$TMP/warm" >"$OUT/load.log" 2>&1 &
  LOAD_PID=$!
  for _ in $(seq 1 120); do [ -e "$TMP/warm" ] || ! kill -0 "$LOAD_PID" 2>/dev/null && break; sleep 0.5; done
  if [ -e "$TMP/warm" ]; then
    sleep 5 # let NVML's utilisation window (1/6 s to 1 s) and power averaging see the load
    say "load: PyTorch bf16 8192x8192 matmul loop on every GPU for ${LOAD_SECONDS}s"
  else
    say "load: the PyTorch loop did not start (see load.log); figures below are idle ones"
  fi
else
  say "load: no PyTorch with CUDA here; figures below are idle ones"
fi

# ---- the three readings, taken back to back
say "readings"
"${AGENT_CMD[@]}" >"$OUT/probe.json" 2>"$OUT/probe.stderr"
note "agent --probe exit $? ($(wc -c <"$OUT/probe.json") bytes)"
nvidia-smi --query-gpu=name,uuid,memory.total,driver_version,utilization.gpu,power.draw,temperature.gpu --format=csv \
  | tee "$OUT/nvidia-smi.csv" | sed 's/^/   /' | tee -a "$OUT/report.txt"
HAVE_PYNVML=0
if python3 -c 'import pynvml' 2>/dev/null; then
  HAVE_PYNVML=1
  python3 - >"$OUT/pynvml.json" 2>"$OUT/pynvml.stderr" <<'PY'
import json, pynvml as n
n.nvmlInit()
def s(v): return v.decode() if isinstance(v, bytes) else v
def tryf(f, *a):
    # NOT_SUPPORTED and friends, or a function this pynvml lacks: unknown, not a failure of the check.
    try: return f(*a)
    except Exception: return None
clocks = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(n, "nvmlDeviceGetCurrentClocksThrottleReasons")
out = {"driverVersion": s(n.nvmlSystemGetDriverVersion()), "cudaDriverVersion": tryf(n.nvmlSystemGetCudaDriverVersion), "gpus": []}
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    util = tryf(n.nvmlDeviceGetUtilizationRates, h)
    power = tryf(n.nvmlDeviceGetPowerUsage, h)
    mig = tryf(n.nvmlDeviceGetMigMode, h)
    out["gpus"].append({
        "index": i, "name": s(n.nvmlDeviceGetName(h)), "uuid": s(n.nvmlDeviceGetUUID(h)),
        "memoryTotalBytes": n.nvmlDeviceGetMemoryInfo(h).total,
        "utilizationPercent": util.gpu if util else None,
        "powerWatts": power / 1000 if power is not None else None,
        "temperatureC": tryf(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
        "slowdownTemperatureC": tryf(n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "eccVolatileUncorrected": tryf(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC),
        "clocksEventReasons": tryf(clocks, h),
        "pcie": [tryf(f, h) for f in (n.nvmlDeviceGetCurrPcieLinkGeneration, n.nvmlDeviceGetMaxPcieLinkGeneration,
                                      n.nvmlDeviceGetCurrPcieLinkWidth, n.nvmlDeviceGetMaxPcieLinkWidth)],
        "migEnabled": (mig[0] == 1) if mig else None,
    })
print(json.dumps(out))
PY
  note "pynvml exit $?"
else
  note "pynvml not installed: that column is skipped (pip install nvidia-ml-py where allowed)"
fi
[ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null; LOAD_PID=""

# ---- comparison, GPU by GPU
say "comparison (probe vs nvidia-smi vs pynvml)"
python3 - "$OUT" "$HAVE_PYNVML" "$HAVE_TORCH" <<'PY' | tee -a "$OUT/report.txt"
import csv, json, os, re, sys
out, have_pynvml, have_torch = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
try:
    probe = json.load(open(os.path.join(out, "probe.json")))
except Exception as e:
    print(f"   the probe printed no JSON ({e}); see probe.stderr"); sys.exit(0)
smi_banner = open(os.path.join(out, "nvidia-smi.txt")).read()
cuda_smi = (re.search(r"CUDA Version: ([0-9.]+)", smi_banner) or [None, None])[1]
rows = list(csv.reader(open(os.path.join(out, "nvidia-smi.csv"))))[1:]
smi = [dict(zip(["name", "uuid", "mem", "driver", "util", "power", "temp"], [c.strip() for c in r])) for r in rows if r]
py = json.load(open(os.path.join(out, "pynvml.json"))) if have_pynvml and os.path.getsize(os.path.join(out, "pynvml.json")) else None
inv, sample = probe["gpu"]["inventory"], probe["gpu"]["sample"]
diffs = 0
def num(s):
    m = re.search(r"[-0-9.]+", s or "")
    return float(m.group()) if m else None
def line(gpu, field, ours, theirs, ok):
    global diffs
    diffs += 0 if ok else 1
    print(f"   gpu{gpu} {field:<16} probe={ours!s:<44} {theirs:<60} {'ok' if ok else 'DIFF'}")
print(f"   probe: source={inv['source']} driver={inv['driverVersion']} cuda={inv['cudaVersion']} "
      f"sampleMs={probe['sampleMs']} protocolErrors={probe['protocolErrors'] or 'none'}")
line("*", "driver", inv["driverVersion"], f"smi={smi[0]['driver'] if smi else None} pynvml={py and py['driverVersion']}",
     bool(smi) and inv["driverVersion"] == smi[0]["driver"] and (py is None or py["driverVersion"] == inv["driverVersion"]))
py_cuda = py and py["cudaDriverVersion"] and f"{py['cudaDriverVersion'] // 1000}.{py['cudaDriverVersion'] % 1000 // 10}"
line("*", "cuda", inv["cudaVersion"], f"smi={cuda_smi} pynvml={py_cuda}",
     inv["cudaVersion"] == cuda_smi and (py is None or py_cuda == inv["cudaVersion"]))
if len(inv["devices"]) != len(smi):
    print(f"   GPU count: probe {len(inv['devices'])}, nvidia-smi {len(smi)}  DIFF"); diffs += 1
for d in inv["devices"]:
    i = d["index"]
    s = smi[i] if i < len(smi) else {}
    p = py["gpus"][i] if py and i < len(py["gpus"]) else None
    m = next((x for x in sample if x["index"] == i), {})
    line(i, "name", d["name"], f"smi={s.get('name')} pynvml={p and p['name']}", d["name"] == s.get("name") and (not p or p["name"] == d["name"]))
    line(i, "uuid", d["uuid"], f"smi={s.get('uuid')}", d["uuid"] == s.get("uuid") and (not p or p["uuid"] == d["uuid"]))
    mib = d["memoryTotalBytes"] / 2**20 if d["memoryTotalBytes"] is not None else None
    line(i, "memory.total", f"{mib} MiB", f"smi={s.get('mem')} pynvml={p and p['memoryTotalBytes'] / 2**20} MiB",
         mib is not None and abs(mib - (num(s.get("mem")) or -1)) <= 1 and (not p or p["memoryTotalBytes"] == d["memoryTotalBytes"]))
    # Readings taken seconds apart under load: close, not equal.
    u, su = m.get("utilizationPercent"), num(s.get("util"))
    line(i, "utilization", u, f"smi={su} pynvml={p and p['utilizationPercent']} (within 15)", u is not None and su is not None and abs(u - su) <= 15)
    w, sw = m.get("powerWatts"), num(s.get("power"))
    line(i, "power.draw", w, f"smi={sw} W pynvml={p and p['powerWatts']} (within 15%)", w is not None and sw is not None and abs(w - sw) <= 0.15 * max(sw, 50))
    t, st = m.get("temperatureC"), num(s.get("temp"))
    line(i, "temperature", t, f"smi={st} pynvml={p and p['temperatureC']} (within 3)", t is not None and st is not None and abs(t - st) <= 3)
    h = m.get("health") or {}
    line(i, "migEnabled", d.get("migEnabled"), f"pynvml={p and p['migEnabled']}", not p or p["migEnabled"] is None or p["migEnabled"] == d.get("migEnabled"))
    if p:
        line(i, "slowdown temp", h.get("slowdownTemperatureC"), f"pynvml={p['slowdownTemperatureC']}", h.get("slowdownTemperatureC") == p["slowdownTemperatureC"])
        pc = h.get("pcie") or {}
        ours = [pc.get("currentGen"), pc.get("maxGen"), pc.get("currentWidth"), pc.get("maxWidth")]
        line(i, "pcie gen/w", ours, f"pynvml={p['pcie']} (current may move)", ours[1] == p["pcie"][1] and ours[3] == p["pcie"][3])
        ecc = (h.get("ecc") or {}).get("volatileUncorrected")
        line(i, "ecc vol. unc.", ecc, f"pynvml={p['eccVolatileUncorrected']}", ecc == p["eccVolatileUncorrected"])
    print(f"   gpu{i} health           state={h.get('state')} reasons={[r['code'] for r in h.get('reasons', [])]} "
          f"throttle={h.get('throttleReasons')} xids={[x['xid'] for x in h.get('xids', [])]}")
print(f"   {'all fields agree' if diffs == 0 else f'{diffs} field(s) differ'}"
      f"{'' if have_torch else ' (no load: idle figures)'}")
PY

# ---- struct layouts: the real nvml.h vs the table the agent's koffi declarations are tested against
say "NVML struct layouts"
cat >"$TMP/expected.txt" <<'EOF'
# BEGIN NVML_H_LAYOUT
nvmlMemory_t=24
nvmlMemory_t.total=0
nvmlMemory_t.free=8
nvmlMemory_t.used=16
nvmlUtilization_t=8
nvmlUtilization_t.gpu=0
nvmlUtilization_t.memory=4
nvmlPciInfo_t=68
nvmlPciInfo_t.busIdLegacy=0
nvmlPciInfo_t.domain=16
nvmlPciInfo_t.bus=20
nvmlPciInfo_t.device=24
nvmlPciInfo_t.pciDeviceId=28
nvmlPciInfo_t.pciSubSystemId=32
nvmlPciInfo_t.busId=36
nvmlProcessInfo_t=24
nvmlProcessInfo_t.pid=0
nvmlProcessInfo_t.usedGpuMemory=8
nvmlProcessInfo_t.gpuInstanceId=16
nvmlProcessInfo_t.computeInstanceId=20
nvmlEventData_t=32
nvmlEventData_t.device=0
nvmlEventData_t.eventType=8
nvmlEventData_t.eventData=16
nvmlEventData_t.gpuInstanceId=24
nvmlEventData_t.computeInstanceId=28
# END NVML_H_LAYOUT
EOF
HEADER="${NVML_H:-}"
if [ -z "$HEADER" ]; then
  for candidate in /usr/local/cuda/include/nvml.h /usr/local/cuda-*/include/nvml.h \
    /usr/local/cuda/targets/*/include/nvml.h /usr/include/nvml.h /opt/nvidia/*/include/nvml.h \
    "$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)"/nvidia/*/include/nvml.h; do
    [ -f "$candidate" ] && { HEADER="$candidate"; break; }
  done
fi
CC="$(command -v cc || command -v gcc || true)"
if [ -z "$HEADER" ]; then
  note "no nvml.h found (set NVML_H=/path/to/nvml.h); layouts not compared"
elif [ -z "$CC" ]; then
  note "no C compiler; layouts not compared (header: $HEADER)"
else
  note "header: $HEADER ($(grep -m1 -o 'NVML_API_VERSION *[0-9]*' "$HEADER"))"
  cat >"$TMP/layout.c" <<'C'
#include <stddef.h>
#include <stdio.h>
/* nvml.h itself comes in with -include, whatever its file is called. */
#define SIZE(t) printf("%s=%zu\n", #t, sizeof(t))
#define OFF(t, f) printf("%s.%s=%zu\n", #t, #f, offsetof(t, f))
int main(void) {
  SIZE(nvmlMemory_t); OFF(nvmlMemory_t, total); OFF(nvmlMemory_t, free); OFF(nvmlMemory_t, used);
  SIZE(nvmlUtilization_t); OFF(nvmlUtilization_t, gpu); OFF(nvmlUtilization_t, memory);
  SIZE(nvmlPciInfo_t); OFF(nvmlPciInfo_t, busIdLegacy); OFF(nvmlPciInfo_t, domain); OFF(nvmlPciInfo_t, bus);
  OFF(nvmlPciInfo_t, device); OFF(nvmlPciInfo_t, pciDeviceId); OFF(nvmlPciInfo_t, pciSubSystemId); OFF(nvmlPciInfo_t, busId);
  SIZE(nvmlProcessInfo_t); OFF(nvmlProcessInfo_t, pid); OFF(nvmlProcessInfo_t, usedGpuMemory);
  OFF(nvmlProcessInfo_t, gpuInstanceId); OFF(nvmlProcessInfo_t, computeInstanceId);
  SIZE(nvmlEventData_t); OFF(nvmlEventData_t, device); OFF(nvmlEventData_t, eventType); OFF(nvmlEventData_t, eventData);
  OFF(nvmlEventData_t, gpuInstanceId); OFF(nvmlEventData_t, computeInstanceId);
  return 0;
}
C
  if "$CC" -include "$HEADER" -o "$TMP/layout" "$TMP/layout.c" 2>"$OUT/layout-cc.txt" && "$TMP/layout" >"$OUT/layout.txt"; then
    if diff <(grep -v '^#' "$TMP/expected.txt") "$OUT/layout.txt" >"$OUT/layout.diff"; then
      note "all $(wc -l <"$OUT/layout.txt") sizes and offsets match the agent's table"
    else
      note "LAYOUT DRIFT (expected < > this header):"; sed 's/^/   /' "$OUT/layout.diff" | tee -a "$OUT/report.txt"
    fi
  else
    note "compiling against $HEADER failed: see layout-cc.txt"
  fi
fi
say "done: $OUT (report.txt, probe.json, nvidia-smi.csv, pynvml.json, layout.txt)"
