#!/usr/bin/env node
// Built from cli/src by cli/scripts/build.ts (npm run build -w @anvil/cli). Do not edit.
var __defProp = Object.defineProperty;
var __getOwnPropNames = Object.getOwnPropertyNames;
var __esm = (fn, res, err) => function __init() {
  if (err) throw err[0];
  try {
    return fn && (res = (0, fn[__getOwnPropNames(fn)[0]])(fn = 0)), res;
  } catch (e) {
    throw err = [e], e;
  }
};
var __export = (target, all) => {
  for (var name in all)
    __defProp(target, name, { get: all[name], enumerable: true });
};

// src/wait.ts
var wait_exports = {};
__export(wait_exports, {
  waitUntil: () => waitUntil
});
async function waitUntil(timeoutMs, check) {
  const deadline = Date.now() + timeoutMs;
  for (; ; ) {
    const value = await check();
    if (value !== null) return value;
    if (Date.now() >= deadline) return null;
    await new Promise((resolve2) => setTimeout(resolve2, 1e3));
  }
}
var init_wait = __esm({
  "src/wait.ts"() {
    "use strict";
  }
});

// src/cli.ts
import { parseArgs } from "node:util";

// src/exit-codes.ts
var EXIT = {
  ok: 0,
  /** Anything else: a 5xx answer, an unexpected failure. */
  failure: 1,
  /** Bad command line: unknown command or option, missing or malformed argument. */
  usage: 2,
  /** No credentials (not logged in), or the key was refused (401). */
  unauthenticated: 3,
  /** The key or the member may not do this (403). */
  forbidden: 4,
  /** The resource does not exist, or is not visible to this account (404). */
  notFound: 5,
  /** The API refused the request as it stands: invalid input or state (400, 409, 413, 422 and other 4xx). */
  refused: 6,
  /** Rate limited (429): try again after the time the message names. */
  rateLimited: 7,
  /** The control plane could not be reached (connection refused, DNS, TLS, timeout). */
  unreachable: 8,
  /** The work ran and failed: a job that ended FAILED, CANCELLED or TIMED_OUT, an upload the server rejected. */
  jobFailed: 9
};
function exitCodeForStatus(status) {
  if (status === 401) return EXIT.unauthenticated;
  if (status === 403) return EXIT.forbidden;
  if (status === 404) return EXIT.notFound;
  if (status === 429) return EXIT.rateLimited;
  if (status >= 400 && status < 500) return EXIT.refused;
  return EXIT.failure;
}
var CliError = class extends Error {
  constructor(message, exitCode) {
    super(message);
    this.exitCode = exitCode;
    this.name = "CliError";
  }
  exitCode;
};
var UsageError = class extends CliError {
  constructor(message) {
    super(message, EXIT.usage);
    this.name = "UsageError";
  }
};
var ApiFailure = class _ApiFailure extends CliError {
  constructor(status, code2, apiMessage, requestId, details2) {
    super(_ApiFailure.describe(status, code2, apiMessage, requestId), exitCodeForStatus(status));
    this.status = status;
    this.code = code2;
    this.apiMessage = apiMessage;
    this.requestId = requestId;
    this.details = details2;
    this.name = "ApiFailure";
  }
  status;
  code;
  apiMessage;
  requestId;
  details;
  static describe(status, code2, message, requestId) {
    const what = [code2, `HTTP ${status}`, requestId ? `request ${requestId}` : null].filter(Boolean);
    return `${message} (${what.join(", ")})`;
  }
};

// src/api.ts
var USER_AGENT = "anvil-cli/0.1.0";
var ApiClient = class {
  constructor(baseUrl, key, fetchImpl = fetch) {
    this.baseUrl = baseUrl;
    this.key = key;
    this.fetchImpl = fetchImpl;
  }
  baseUrl;
  key;
  fetchImpl;
  url(path, query = {}) {
    const url = new URL(path.startsWith("http") ? path : `${this.baseUrl}${path}`);
    for (const [name, value] of Object.entries(query)) {
      if (value !== void 0) url.searchParams.set(name, String(value));
    }
    return url.toString();
  }
  async call(method, path, options = {}) {
    const response = await this.send(method, path, options);
    const text = await response.text();
    const body2 = text === "" ? null : parseJson(text);
    if (body2 && typeof body2 === "object" && body2.success === true)
      return body2.data;
    return body2;
  }
  /** The response itself (streams: logs, SSE), after the status was checked. */
  async send(method, path, options = {}) {
    const headers = {
      authorization: `Bearer ${options.token ?? this.key}`,
      "user-agent": USER_AGENT,
      ...options.headers
    };
    let body2;
    if (options.raw) {
      body2 = options.raw.body;
      headers["content-type"] = options.raw.contentType ?? "application/octet-stream";
      if (options.raw.length !== void 0) headers["content-length"] = String(options.raw.length);
    } else if (options.body !== void 0) {
      body2 = JSON.stringify(options.body);
      headers["content-type"] = "application/json";
    }
    const target = this.url(path, options.query);
    let response;
    try {
      response = await this.fetchImpl(target, {
        method,
        headers,
        ...body2 === void 0 ? {} : { body: body2 },
        // Node's fetch needs this to send a stream as the request body.
        ...body2 instanceof ReadableStream ? { duplex: "half" } : {},
        ...options.signal ? { signal: options.signal } : {}
      });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      const cause = error.cause;
      const reason = cause?.code ?? cause?.message ?? error.message;
      throw new CliError(`cannot reach ${new URL(target).origin}: ${reason}`, EXIT.unreachable);
    }
    if (!response.ok) throw await failureOf(response);
    return response;
  }
};
function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
async function failureOf(response) {
  const text = await response.text().catch(() => "");
  const body2 = parseJson(text);
  let code2 = null;
  let message = `${response.status} ${response.statusText}`.trim();
  let details2 = null;
  let requestId = response.headers.get("x-request-id");
  if (body2 && typeof body2 === "object") {
    const wrapped = body2["error"];
    if (wrapped && typeof wrapped === "object") {
      const error = wrapped;
      code2 = typeof error["code"] === "string" ? error["code"] : null;
      if (typeof error["message"] === "string") message = error["message"];
      details2 = error["details"] ?? null;
      const meta = body2["meta"];
      requestId = meta?.request_id ?? requestId;
    } else {
      if (typeof body2["error"] === "string" && typeof body2["code"] === "number") code2 = body2["error"];
      if (typeof body2["message"] === "string") message = body2["message"];
      details2 = body2["details"] ?? null;
    }
  } else if (typeof body2 === "string" && body2.trim() !== "") {
    message = body2.trim().slice(0, 500);
  }
  return new ApiFailure(response.status, code2, message, requestId, details2);
}

// src/config.ts
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
function configPath(env) {
  const base = env["XDG_CONFIG_HOME"] || join(env["HOME"] || "/", ".config");
  return join(base, "anvil", "config.json");
}
var PROFILE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
function checkProfileName(name) {
  if (!PROFILE_NAME.test(name))
    throw new UsageError(`profile name "${name}": use letters, digits, '.', '_' or '-' (at most 64)`);
  return name;
}
var ConfigStore = class {
  constructor(path, warn) {
    this.path = path;
    this.warn = warn;
  }
  path;
  warn;
  read() {
    if (!existsSync(this.path)) return { current: null, profiles: {} };
    const mode = statSync(this.path).mode & 511;
    if ((mode & 63) !== 0) {
      this.warn(`${this.path} was readable by others (mode ${mode.toString(8)}); set it to 600`);
      chmodSync(this.path, 384);
    }
    let parsed;
    try {
      parsed = JSON.parse(readFileSync(this.path, "utf8"));
    } catch (error) {
      throw new CliError(`${this.path} is not valid JSON (${error.message})`, EXIT.failure);
    }
    const file = parsed;
    return {
      current: typeof file.current === "string" ? file.current : null,
      profiles: file.profiles && typeof file.profiles === "object" ? file.profiles : {}
    };
  }
  write(config) {
    mkdirSync(dirname(this.path), { recursive: true, mode: 448 });
    const temporary = `${this.path}.${process.pid}.tmp`;
    writeFileSync(temporary, `${JSON.stringify(config, null, 2)}
`, { mode: 384 });
    chmodSync(temporary, 384);
    renameSync(temporary, this.path);
  }
};
function resolveCredentials(config, env, profileFlag) {
  const name = profileFlag ?? env["ANVIL_PROFILE"] ?? config.current ?? void 0;
  const profile = name === void 0 ? void 0 : config.profiles[name];
  if (name !== void 0 && profile === void 0 && (profileFlag ?? env["ANVIL_PROFILE"]) !== void 0) {
    throw new CliError(`no profile "${name}": run anvil login --profile ${name}`, EXIT.unauthenticated);
  }
  const url = env["ANVIL_URL"] || profile?.url;
  const key = env["ANVIL_API_KEY"] || profile?.key;
  if (!url || !key) {
    throw new CliError(
      "not logged in: run anvil login --url <control plane> --key <API key> (or set ANVIL_URL and ANVIL_API_KEY)",
      EXIT.unauthenticated
    );
  }
  return { url: normaliseUrl(url), key, profile: profile ? name : null };
}
function normaliseUrl(url) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`"${url}" is not a URL (e.g. https://anvil.example.com)`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw new UsageError(`"${url}": the control plane's URL starts with https:// or http://`);
  return parsed.toString().replace(/\/+$/, "");
}

// src/output.ts
function cell(value) {
  if (value === null || value === void 0 || value === "") return "-";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value).replace(/\s+/g, " ");
}
function table(rows, columns) {
  const cells = rows.map((row) => columns.map((column) => cell(column.value(row))));
  const headers = columns.map((column) => column.header.toUpperCase());
  const widths = headers.map((header, i) => Math.max(header.length, ...cells.map((line) => line[i].length)));
  const render = (line) => line.map((text, i) => i === line.length - 1 ? text : text.padEnd(widths[i])).join("   ").trimEnd();
  return [render(headers), ...cells.map(render)].join("\n") + "\n";
}
function details(fields) {
  const width = Math.max(...fields.map(([name]) => name.length)) + 1;
  return fields.map(([name, value]) => `${`${name}:`.padEnd(width)}  ${cell(value)}`).join("\n") + "\n";
}
function json(value) {
  return `${JSON.stringify(value, null, 2)}
`;
}
var UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
function bytes(count) {
  let value = count;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${count} B` : `${value.toFixed(1)} ${UNITS[unit]}`;
}
function parseBytes(text) {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$/i.exec(text);
  if (!match) return null;
  const unit = (match[2] ?? "").toLowerCase().replace(/b$/, "");
  const powers = { "": 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12, ki: 1024, mi: 1024 ** 2 };
  Object.assign(powers, { gi: 1024 ** 3, ti: 1024 ** 4 });
  const factor = powers[unit];
  return factor === void 0 ? null : Math.round(Number(match[1]) * factor);
}

// src/command.ts
var Context = class {
  constructor(io, jsonOutput, profileFlag) {
    this.io = io;
    this.jsonOutput = jsonOutput;
    this.profileFlag = profileFlag;
    this.store = new ConfigStore(configPath(io.env), (line) => this.warn(line));
  }
  io;
  jsonOutput;
  profileFlag;
  store;
  get env() {
    return this.io.env;
  }
  credentials() {
    return resolveCredentials(this.store.read(), this.io.env, this.profileFlag);
  }
  api() {
    const { url, key } = this.credentials();
    return new ApiClient(url, key, this.io.fetch);
  }
  out(text) {
    this.io.stdout.write(text);
  }
  warn(line) {
    this.io.stderr.write(`anvil: ${line}
`);
  }
  /** --json prints `data` as JSON; otherwise `human()` renders it for people. */
  show(data, human) {
    this.out(this.jsonOutput ? json(data) : human());
  }
};

// src/streams.ts
async function readAllText(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks).toString("utf8");
}

// src/commands/auth.ts
async function keyFrom(context, flag) {
  if (flag === "-") return (await readAllText(context.io.stdin)).trim();
  const key = flag ?? context.env["ANVIL_API_KEY"];
  if (!key)
    throw new UsageError("give the API key with --key (or --key - to read it from stdin, or ANVIL_API_KEY)");
  return key;
}
var login = {
  path: ["login"],
  summary: "Check an API key and store it in a profile",
  description: 'Checks the key with GET /v2/auth/verify, then stores URL and key in ~/.config/anvil/config.json (mode 0600) under the profile (default "default") and makes it the current one.',
  options: {
    url: {
      type: "string",
      description: "The control plane, e.g. https://anvil.example.com (or ANVIL_URL)",
      value: "url"
    },
    key: {
      type: "string",
      description: 'The API key; "-" reads it from stdin (or ANVIL_API_KEY)',
      value: "key"
    }
  },
  examples: [
    "anvil login --url https://anvil.example.com --key anv_live_\u2026",
    "pass show anvil | anvil login --url https://anvil.example.com --key - --profile prod"
  ],
  async run(context, { values }) {
    const url = values["url"] ?? context.env["ANVIL_URL"];
    if (!url) throw new UsageError("give the control plane with --url (or ANVIL_URL)");
    const base = normaliseUrl(url);
    const key = await keyFrom(context, values["key"]);
    const verify = await new ApiClient(base, key, context.io.fetch).call("GET", "/v2/auth/verify");
    const name = checkProfileName(context.profileFlag ?? context.env["ANVIL_PROFILE"] ?? "default");
    const config = context.store.read();
    config.profiles[name] = { url: base, key, accountId: verify.account_id, keyId: verify.key_id };
    config.current = name;
    context.store.write(config);
    context.show(
      { profile: name, url: base, ...verify },
      () => `Logged in to ${base} as key ${verify.key_id} (account ${verify.account_id}, ${verify.permissions.join("/")}); profile "${name}" saved in ${context.store.path}
`
    );
    return EXIT.ok;
  }
};
var logout = {
  path: ["logout"],
  summary: "Forget the key of a profile (the current one, --profile, or --all)",
  options: { all: { type: "boolean", description: "Forget every profile" } },
  examples: ["anvil logout", "anvil logout --profile staging", "anvil logout --all"],
  async run(context, { values }) {
    const config = context.store.read();
    const names = values["all"] ? Object.keys(config.profiles) : [context.profileFlag ?? config.current ?? ""];
    for (const name of names) {
      if (!config.profiles[name]) throw new CliError(`no profile "${name}" to log out of`, EXIT.notFound);
      delete config.profiles[name];
    }
    if (config.current && !config.profiles[config.current]) config.current = null;
    context.store.write(config);
    context.show({ removed: names }, () => `Logged out: ${names.join(", ") || "nothing to do"}
`);
    return EXIT.ok;
  }
};
var profilesList = {
  path: ["profiles", "list"],
  summary: "List the stored profiles (keys shown by prefix only)",
  examples: ["anvil profiles list"],
  async run(context) {
    const config = context.store.read();
    const rows = Object.entries(config.profiles).map(([name, p]) => ({
      name,
      current: name === config.current,
      url: p.url,
      keyPrefix: `${p.key.slice(0, 12)}\u2026`,
      keyId: p.keyId ?? null,
      accountId: p.accountId ?? null
    }));
    context.show(
      rows,
      () => table(rows, [
        { header: "", value: (r) => r.current ? "*" : " " },
        { header: "name", value: (r) => r.name },
        { header: "url", value: (r) => r.url },
        { header: "key", value: (r) => r.keyPrefix },
        { header: "account", value: (r) => r.accountId }
      ])
    );
    return EXIT.ok;
  }
};
var profilesUse = {
  path: ["profiles", "use"],
  summary: "Make a profile the current one",
  args: "<name>",
  arity: [1, 1],
  examples: ["anvil profiles use prod"],
  async run(context, { positionals }) {
    const name = positionals[0];
    const config = context.store.read();
    if (!config.profiles[name])
      throw new CliError(`no profile "${name}" (see anvil profiles list)`, EXIT.notFound);
    config.current = name;
    context.store.write(config);
    context.show({ current: name }, () => `Now using profile "${name}" (${config.profiles[name].url})
`);
    return EXIT.ok;
  }
};
var whoami = {
  path: ["whoami"],
  summary: "Show the key, account, permissions and scopes in use",
  examples: ["anvil whoami", "anvil whoami --profile prod --json"],
  async run(context) {
    const api = context.api();
    const verify = await api.call("GET", "/v2/auth/verify");
    context.show(
      { url: api.baseUrl, ...verify },
      () => table(
        [verify],
        [
          { header: "key", value: (v) => v.key_id },
          { header: "account", value: (v) => v.account_id },
          { header: "permissions", value: (v) => v.permissions.join(",") },
          { header: "scopes", value: (v) => v.scopes.join(",") },
          { header: "expires", value: (v) => v.expires_at ?? "never" }
        ]
      )
    );
    return EXIT.ok;
  }
};
var authCommands = [login, logout, profilesList, profilesUse, whoami];

// src/commands/clusters.ts
init_wait();

// src/commands/resolve.ts
async function listClusters(api, query = {}) {
  const all = [];
  for (let page = 1; ; page++) {
    const data = await api.call("GET", "/v1/clusters", {
      query: { ...query, limit: 100, page }
    });
    all.push(...data.clusters);
    if (!data.pagination.has_next) return all;
  }
}
async function findCluster(api, nameOrId) {
  if (nameOrId.startsWith("cluster_"))
    return api.call("GET", `/v1/clusters/${encodeURIComponent(nameOrId)}`);
  const matches = (await listClusters(api, { search: nameOrId })).filter((c) => c.name === nameOrId);
  if (matches.length === 0) throw new CliError(`no cluster named "${nameOrId}"`, EXIT.notFound);
  if (matches.length > 1) {
    throw new CliError(
      `${matches.length} clusters are named "${nameOrId}" (${matches.map((c) => c.id).join(", ")}): use the id`,
      EXIT.refused
    );
  }
  return matches[0];
}
function age(iso, now = Date.now()) {
  if (!iso) return "-";
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1e3));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)}h`;
  return `${Math.round(seconds / 86400)}d`;
}

// src/commands/clusters.ts
var COLUMNS = [
  { header: "id", value: (c) => c.id },
  { header: "name", value: (c) => c.name },
  { header: "status", value: (c) => c.status },
  { header: "gpus", value: (c) => `${c.gpu_count}x${c.gpu_type}` },
  { header: "image", value: (c) => c.docker_image },
  { header: "ssh", value: (c) => c.ssh_connection ? "yes" : "no" },
  { header: "age", value: (c) => age(c.created_at) }
];
function describe(c) {
  const ssh2 = c.ssh_connection;
  return details([
    ["ID", c.id],
    ["Name", c.name],
    ["Status", c.status_reason ? `${c.status} (${c.status_reason})` : c.status],
    ["GPUs", `${c.gpu_count}x${c.gpu_type}`],
    ["CPU / memory / disk", `${c.cpu_cores} cores / ${c.memory_gb} GiB / ${c.storage_gb} GB`],
    ["Image", c.docker_image],
    ["SSH", ssh2 ? `ssh -p ${ssh2.port} ${ssh2.username}@${ssh2.host}   (or: anvil ssh ${c.name})` : "disabled"],
    ["Proxy", c.proxy_url],
    ["Ports", c.port_mappings.map((p) => `${p.internal_port}/${p.protocol}`).join(", ")],
    ["Cost", `${c.cost.total_cost} ${c.cost.currency} (${c.cost.hourly_rate}/h)`],
    ["Created", c.created_at]
  ]);
}
var list = {
  path: ["clusters", "list"],
  summary: "List clusters",
  options: {
    status: {
      type: "string",
      description: "Only clusters in this status (running, stopped, \u2026)",
      value: "status"
    }
  },
  examples: ["anvil clusters list", "anvil clusters list --status running --json"],
  async run(context, { values }) {
    const status = values["status"];
    const clusters = await listClusters(context.api(), status ? { status } : {});
    context.show(clusters, () => table(clusters, COLUMNS));
    return EXIT.ok;
  }
};
var get = {
  path: ["clusters", "get"],
  summary: "Show a cluster (by name or id)",
  args: "<cluster>",
  arity: [1, 1],
  examples: ["anvil clusters get dev", "anvil clusters get cluster_abc123 --json"],
  async run(context, { positionals }) {
    const cluster = await findCluster(context.api(), positionals[0]);
    context.show(cluster, () => describe(cluster));
    return EXIT.ok;
  }
};
function int(values, name) {
  const text = values[name];
  if (text === void 0) return void 0;
  if (!/^\d+$/.test(text)) throw new UsageError(`--${name} takes a whole number, got "${text}"`);
  return Number(text);
}
function envPairs(list7) {
  if (!list7?.length) return void 0;
  return Object.fromEntries(
    list7.map((pair) => {
      const at = pair.indexOf("=");
      if (at <= 0) throw new UsageError(`--env takes NAME=value, got "${pair}"`);
      return [pair.slice(0, at), pair.slice(at + 1)];
    })
  );
}
async function waitRunning(context, api, id, seconds) {
  const cluster = await waitUntil(seconds * 1e3, async () => {
    const c = await api.call("GET", `/v1/clusters/${id}`);
    return c.status === "running" || c.status === "error" ? c : null;
  });
  if (!cluster) throw new CliError(`cluster ${id} is not running after ${seconds} s`, EXIT.failure);
  if (cluster.status === "error") {
    context.warn(`cluster ${id} failed: ${cluster.status_reason ?? "no reason given"}`);
    throw new CliError(`cluster ${id} is in error`, EXIT.jobFailed);
  }
  return cluster;
}
var WAIT = {
  wait: { type: "boolean", description: "Wait until the cluster runs (exit 9 if it goes to error)" },
  timeout: { type: "string", description: "Seconds --wait waits (default 600)", value: "seconds" }
};
var create = {
  path: ["clusters", "create"],
  summary: "Create a GPU cluster",
  options: {
    name: { type: "string", description: "Name (required)", value: "name" },
    image: { type: "string", description: "Docker image (unless the template names one)", value: "image" },
    template: { type: "string", description: "Template id", value: "id" },
    "gpu-type": { type: "string", description: "GPU type, e.g. H100", value: "type" },
    "gpu-count": { type: "string", description: "GPUs (default 1)", value: "n" },
    cpu: { type: "string", description: "CPU cores", value: "n" },
    memory: { type: "string", description: "Memory in GiB", value: "gib" },
    storage: { type: "string", description: "Volume size in GB", value: "gb" },
    region: { type: "string", description: "Region", value: "region" },
    command: { type: "string", description: "Command, run as sh -c", value: "command" },
    env: { type: "string", multiple: true, description: "Environment variable", value: "name=value" },
    port: { type: "string", multiple: true, description: "Container port to map (TCP)", value: "port" },
    ssh: { type: "boolean", description: "Enable SSH (anvil ssh, anvil ssh-config)" },
    ...WAIT
  },
  examples: [
    "anvil clusters create --name dev --image pytorch/pytorch:2.4.0-cuda12.4 --gpu-type H100 --gpu-count 2 --ssh --wait",
    "anvil clusters create --name web --image my/app:1 --port 8080 --env MODE=prod"
  ],
  async run(context, { values }) {
    const name = values["name"];
    if (!name) throw new UsageError("--name is required");
    const ports = values["port"]?.map((p) => {
      if (!/^\d+$/.test(p)) throw new UsageError(`--port takes a port number, got "${p}"`);
      return { internal_port: Number(p) };
    });
    const body2 = {
      name,
      docker_image: values["image"],
      template_id: values["template"],
      gpu_type: values["gpu-type"],
      gpu_count: int(values, "gpu-count"),
      cpu_cores: int(values, "cpu"),
      memory_gb: int(values, "memory"),
      storage_gb: int(values, "storage"),
      region: values["region"],
      command: values["command"],
      env: envPairs(values["env"]),
      ports,
      ssh_enabled: values["ssh"] === true ? true : void 0
    };
    const api = context.api();
    let cluster = await api.call("POST", "/v1/clusters", { body: body2 });
    if (values["wait"]) cluster = await waitRunning(context, api, cluster.id, int(values, "timeout") ?? 600);
    context.show(cluster, () => describe(cluster));
    return EXIT.ok;
  }
};
var start = {
  path: ["clusters", "start"],
  summary: "Start a stopped cluster",
  args: "<cluster>",
  arity: [1, 1],
  options: WAIT,
  examples: ["anvil clusters start dev --wait"],
  async run(context, { values, positionals }) {
    const api = context.api();
    const { id } = await findCluster(api, positionals[0]);
    let cluster = await api.call("POST", `/v1/clusters/${id}/start`);
    if (values["wait"]) cluster = await waitRunning(context, api, id, int(values, "timeout") ?? 600);
    context.show(cluster, () => `${cluster.id} ${cluster.status}
`);
    return EXIT.ok;
  }
};
var stop = {
  path: ["clusters", "stop"],
  summary: "Stop a running cluster (its volume is kept)",
  args: "<cluster>",
  arity: [1, 1],
  options: {
    wait: { type: "boolean", description: "Wait until it has stopped" },
    reason: { type: "string", description: "Why (kept with the cluster)", value: "text" }
  },
  examples: ["anvil clusters stop dev", "anvil clusters stop dev --wait"],
  async run(context, { values, positionals }) {
    const api = context.api();
    const { id } = await findCluster(api, positionals[0]);
    const body2 = {
      ...values["wait"] ? { wait_for_completion: true } : {},
      ...values["reason"] ? { stop_reason: values["reason"] } : {}
    };
    const result = await api.call("POST", `/v1/clusters/${id}/stop`, { body: body2 });
    context.show(result, () => `${id} ${result.status ?? "stopping"}
`);
    return EXIT.ok;
  }
};
var remove = {
  path: ["clusters", "delete"],
  summary: "Delete a cluster and its volume",
  args: "<cluster>",
  arity: [1, 1],
  options: {
    yes: { type: "boolean", short: "y", description: "Confirm: the volume is deleted with the cluster" },
    wait: { type: "boolean", description: "Wait until it is gone" },
    force: { type: "boolean", description: "Delete even if the container does not stop cleanly" }
  },
  examples: ["anvil clusters delete dev --yes"],
  async run(context, { values, positionals }) {
    if (!values["yes"])
      throw new UsageError(`deleting ${positionals[0]} removes its volume: add --yes to confirm`);
    const api = context.api();
    const { id } = await findCluster(api, positionals[0]);
    const body2 = {
      confirm_deletion: "DELETE",
      ...values["wait"] ? { wait_for_completion: true } : {},
      ...values["force"] ? { force: true } : {}
    };
    const result = await api.call("DELETE", `/v1/clusters/${id}`, { body: body2 });
    context.show(result, () => `${id} ${result.status ?? "deleting"}
`);
    return EXIT.ok;
  }
};
var clusterCommands = [list, get, create, start, stop, remove];

// src/commands/completion.ts
var BASH = `# anvil completion for bash: eval "$(anvil completion bash)" in ~/.bashrc
_anvil() {
  local cur=\${COMP_WORDS[COMP_CWORD]}
  local IFS=$'\\n'
  COMPREPLY=($(compgen -W "$(anvil __complete "\${COMP_WORDS[@]:1:COMP_CWORD-1}" 2>/dev/null)" -- "$cur"))
}
complete -o default -F _anvil anvil
`;
var ZSH = `#compdef anvil
# anvil completion for zsh: eval "$(anvil completion zsh)" in ~/.zshrc (after compinit)
_anvil() {
  local -a candidates
  candidates=("\${(@f)$(anvil __complete "\${(@)words[2,CURRENT-1]}" 2>/dev/null)}")
  candidates=(\${candidates:#})
  if (( \${#candidates} )); then compadd -a candidates; else _files; fi
}
compdef _anvil anvil
`;
var completion = {
  path: ["completion"],
  summary: "Print the shell completion script for bash or zsh",
  args: "<bash|zsh>",
  arity: [1, 1],
  examples: [
    `echo 'eval "$(anvil completion bash)"' >> ~/.bashrc`,
    `echo 'eval "$(anvil completion zsh)"' >> ~/.zshrc`
  ],
  async run(context, { positionals }) {
    const shell = positionals[0];
    if (shell !== "bash" && shell !== "zsh")
      throw new UsageError(`completion for bash or zsh, not "${shell}"`);
    context.out(shell === "bash" ? BASH : ZSH);
    return EXIT.ok;
  }
};
function completeWith(commands, words) {
  const path = words.filter((w) => !w.startsWith("-"));
  for (let length = Math.min(path.length, 2); length > 0; length--) {
    const command = commands.find((c) => c.path.length === length && c.path.every((w, i) => path[i] === w));
    if (command) {
      const options = Object.keys({ ...command.options, json: 1, profile: 1, help: 1 }).map((o) => `--${o}`);
      return { candidates: options, command };
    }
  }
  const next = commands.filter(
    (c) => !c.path[0].startsWith("__") && path.every((w, i) => c.path[i] === w) && c.path.length > path.length
  ).map((c) => c.path[path.length]);
  return { candidates: [...new Set(next)], command: null };
}
function completeCommand(commands) {
  return {
    path: ["__complete"],
    summary: "Completion candidates (used by the completion scripts)",
    args: "[words...]",
    arity: [0, Number.POSITIVE_INFINITY],
    passThrough: true,
    examples: [],
    async run(context, { positionals }) {
      const { candidates, command } = completeWith(commands(), positionals);
      const lines = [...candidates];
      if (command?.args?.startsWith("<cluster")) {
        try {
          const timeout = new Promise(
            (_, fail) => setTimeout(() => fail(new Error("timeout")), 5e3).unref()
          );
          const clusters = await Promise.race([listClusters(context.api()), timeout]);
          lines.push(...clusters.map((c) => c.name));
        } catch {
        }
      }
      context.out(lines.length ? `${lines.join("\n")}
` : "");
      return EXIT.ok;
    }
  };
}
var completionCommand = completion;

// src/commands/datasets.ts
import { statSync as statSync3 } from "node:fs";
import { basename as basename2 } from "node:path";

// src/upload.ts
import { createHash } from "node:crypto";
import {
  createReadStream,
  existsSync as existsSync2,
  mkdirSync as mkdirSync2,
  readFileSync as readFileSync2,
  rmSync,
  statSync as statSync2,
  writeFileSync as writeFileSync2
} from "node:fs";
import { basename, join as join2, resolve } from "node:path";
import { Readable, Transform } from "node:stream";
var MULTIPART_ABOVE = 100 * 1e3 * 1e3;
var MIN_PART = 5 * 1024 * 1024;
function stateDir(env) {
  return join2(env["XDG_STATE_HOME"] || join2(env["HOME"] || "/", ".local", "state"), "anvil", "uploads");
}
function statePath(env, file, size2, mtimeMs) {
  const id = createHash("sha256").update(`${resolve(file)}\0${size2}\0${mtimeMs}`).digest("hex").slice(0, 32);
  return join2(stateDir(env), `${id}.json`);
}
function sha256Of(file, start2, end) {
  return new Promise((done, fail) => {
    const hash = createHash("sha256");
    createReadStream(file, { start: start2, end: end - 1 }).on("data", (chunk) => hash.update(chunk)).on("end", () => done(hash.digest("hex"))).on("error", fail);
  });
}
function body(file, start2, end, progress) {
  if (end === start2) return Readable.toWeb(Readable.from([]));
  const counting = new Transform({
    transform(chunk, _encoding, next) {
      progress.add(chunk.length);
      next(null, chunk);
    }
  });
  return Readable.toWeb(createReadStream(file, { start: start2, end: end - 1 }).pipe(counting));
}
var DatasetUploader = class {
  constructor(api, env, progress, note) {
    this.api = api;
    this.env = env;
    this.progress = progress;
    this.note = note;
  }
  api;
  env;
  progress;
  note;
  async upload(target, plan) {
    if (plan.size <= plan.multipartAbove && !plan.resumeUploadId) {
      this.progress.start(plan.size, 0);
      const answer = await this.api.call("PUT", `${target.uploadPath}/datasets/${target.datasetId}`, {
        raw: { body: body(plan.file, 0, plan.size, this.progress), length: plan.size },
        ...target.token ? { token: target.token } : {}
      });
      this.progress.done();
      return answer;
    }
    return this.multipart(target, plan);
  }
  /** The remembered upload of this file, if any (`anvil datasets upload` run again continues it). */
  remembered(file) {
    const { size: size2, mtimeMs } = statSync2(file);
    const path = statePath(this.env, file, size2, mtimeMs);
    if (!existsSync2(path)) return null;
    try {
      return JSON.parse(readFileSync2(path, "utf8"));
    } catch {
      return null;
    }
  }
  async multipart(target, plan) {
    const { mtimeMs } = statSync2(plan.file);
    const state = statePath(this.env, plan.file, plan.size, mtimeMs);
    const auth = target.token ? { token: target.token } : {};
    const base = `${target.uploadPath}/datasets/${target.datasetId}/multipart`;
    let upload2 = null;
    if (plan.resumeUploadId) {
      upload2 = await this.api.call("GET", `${base}/${plan.resumeUploadId}`, auth);
    }
    if (!upload2) {
      upload2 = await this.api.call("POST", base, {
        ...auth,
        body: { filename: basename(plan.file), size: plan.size }
      });
    }
    const partSize = plan.resumeUploadId ? this.partSizeOf(upload2, plan) : plan.partSize ?? upload2.partSize;
    if (partSize < upload2.minPartSize && plan.size > partSize)
      throw new CliError(`--part-size must be at least ${upload2.minPartSize} bytes`, EXIT.usage);
    const record = {
      file: resolve(plan.file),
      size: plan.size,
      mtimeMs,
      datasetId: target.datasetId,
      uploadPath: target.uploadPath,
      uploadId: upload2.uploadId,
      partSize,
      ...target.token ? { token: target.token } : {}
    };
    mkdirSync2(stateDir(this.env), { recursive: true, mode: 448 });
    writeFileSync2(state, JSON.stringify(record), { mode: 384 });
    const count = Math.max(1, Math.ceil(plan.size / partSize));
    const held = new Map(upload2.parts.map((p) => [p.partNumber, p]));
    const checksums = /* @__PURE__ */ new Map();
    let already = 0;
    for (let n = 1; n <= count; n++) {
      const start2 = (n - 1) * partSize;
      const end = Math.min(plan.size, start2 + partSize);
      const part = held.get(n);
      if (part && part.size === end - start2 && part.checksum === await sha256Of(plan.file, start2, end)) {
        checksums.set(n, part.checksum);
        already += end - start2;
      }
    }
    if (checksums.size)
      this.note(`resuming upload ${upload2.uploadId}: ${checksums.size} of ${count} parts already uploaded`);
    this.progress.start(plan.size, already);
    for (let n = 1; n <= count; n++) {
      if (checksums.has(n)) continue;
      const start2 = (n - 1) * partSize;
      const end = Math.min(plan.size, start2 + partSize);
      const answer2 = await this.api.call(
        "PUT",
        `${base}/${upload2.uploadId}/parts/${n}`,
        {
          ...auth,
          raw: { body: body(plan.file, start2, end, this.progress), length: end - start2 }
        }
      );
      checksums.set(n, answer2.checksum);
    }
    this.progress.done();
    const parts = [...checksums].sort(([a], [b]) => a - b).map(([partNumber, checksum]) => ({ partNumber, checksum }));
    let answer;
    try {
      answer = await this.api.call("POST", `${base}/${upload2.uploadId}/complete`, {
        ...auth,
        body: { parts }
      });
    } catch (error) {
      if (error instanceof ApiFailure && error.status === 400) rmSync(state, { force: true });
      throw error;
    }
    rmSync(state, { force: true });
    return answer;
  }
  /** A resumed upload keeps the part size its first run used (the held parts' size), else the server's. */
  partSizeOf(upload2, plan) {
    const first = upload2.parts.find((p) => p.partNumber === 1);
    if (first && first.size >= MIN_PART && first.size < plan.size) return first.size;
    return plan.partSize ?? upload2.partSize;
  }
};
function progressBar(stream, label) {
  if (!stream.isTTY) return { start() {
  }, add() {
  }, done() {
  } };
  let total = 0;
  let sent = 0;
  let began = Date.now();
  let drawn = 0;
  let base = 0;
  const draw = (force) => {
    const now = Date.now();
    if (!force && now - drawn < 100) return;
    drawn = now;
    const fraction = total === 0 ? 1 : sent / total;
    const width = 30;
    const filled = Math.round(fraction * width);
    const rate = (sent - base) / Math.max(1e-3, (now - began) / 1e3);
    const mib = (n) => (n / 1024 / 1024).toFixed(1);
    stream.write(
      `\r${label} [${"#".repeat(filled)}${".".repeat(width - filled)}] ${(fraction * 100).toFixed(0).padStart(3)}% ${mib(sent)}/${mib(total)} MiB ${mib(rate)} MiB/s `
    );
  };
  return {
    start(t, already) {
      total = t;
      sent = already;
      base = already;
      began = Date.now();
      draw(true);
    },
    add(bytes2) {
      sent += bytes2;
      draw(false);
    },
    done() {
      draw(true);
      stream.write("\n");
    }
  };
}

// src/commands/datasets.ts
init_wait();
function formatOf(file) {
  const name = file.toLowerCase();
  const known = [
    [/\.jsonl$|\.ndjson$|\.json$/, "jsonl"],
    [/\.csv$/, "csv"],
    [/\.parquet$/, "parquet"],
    [/\.h5$|\.hdf5$/, "hdf5"],
    [/\.zip$/, "zip"],
    [/\.tar$|\.tar\.gz$|\.tgz$/, "tar"]
  ];
  return known.find(([pattern]) => pattern.test(name))?.[1] ?? null;
}
function typeOf(format) {
  if (format === "jsonl") return "text";
  if (format === "csv" || format === "parquet" || format === "hdf5") return "structured";
  return null;
}
var list2 = {
  path: ["datasets", "list"],
  summary: "List training datasets",
  examples: ["anvil datasets list"],
  async run(context) {
    const answer = await context.api().call("GET", "/v2/training/datasets", {
      query: { limit: 100 }
    });
    const datasets = answer.datasets;
    context.show(
      datasets,
      () => table(datasets, [
        { header: "id", value: (d) => d.id },
        { header: "name", value: (d) => d.name },
        { header: "status", value: (d) => d.status },
        { header: "format", value: (d) => d.format },
        { header: "size", value: (d) => typeof d.size?.bytes === "number" ? bytes(d.size.bytes) : null },
        { header: "examples", value: (d) => d.size?.examples },
        { header: "age", value: (d) => age(d.createdAt) }
      ])
    );
    return EXIT.ok;
  }
};
function size(text, option, fallback) {
  if (text === void 0) return fallback;
  const value = parseBytes(text);
  if (value === null) throw new UsageError(`--${option} takes a size such as 64MiB or 100MB, got "${text}"`);
  return value;
}
var upload = {
  path: ["datasets", "upload"],
  summary: "Upload a file as a training dataset (multipart above 100 MB, resumable)",
  args: "<file>",
  arity: [1, 1],
  description: "Creates the dataset (named after the file unless --name; format from the extension) and sends the bytes: one PUT up to --multipart-above (default 100MB), else a multipart upload in parts of --part-size (default the control plane's suggestion). An interrupted multipart upload continues where it stopped when the same command runs again (state in $XDG_STATE_HOME/anvil/uploads, default ~/.local/state), or with --dataset and --resume <upload id>. A progress bar shows on a terminal. --wait waits for processing: exit 9 if the dataset ends in error.",
  options: {
    name: { type: "string", description: "Dataset name (default: the file name)", value: "name" },
    format: {
      type: "string",
      description: "jsonl, csv, parquet, hdf5, zip or tar (default: from the extension)",
      value: "format"
    },
    type: {
      type: "string",
      description: "text, image, audio, video, structured or multimodal",
      value: "type"
    },
    dataset: {
      type: "string",
      description: "Upload a new version of this dataset instead of creating one",
      value: "ds_\u2026"
    },
    resume: {
      type: "string",
      description: "Continue this multipart upload (with --dataset)",
      value: "dsup_\u2026"
    },
    "multipart-above": {
      type: "string",
      description: "Files larger than this go multipart (default 100MB)",
      value: "size"
    },
    "part-size": { type: "string", description: "Multipart part size (at least 5MiB)", value: "size" },
    wait: { type: "boolean", description: "Wait until the dataset is processed (ready or error)" }
  },
  examples: [
    "anvil datasets upload train.jsonl --wait",
    "anvil datasets upload images.tar --name images-v2 --type image",
    "anvil datasets upload big.parquet --part-size 256MiB   # run it again after an interruption to resume"
  ],
  async run(context, { values, positionals }) {
    const file = positionals[0];
    let fileSize;
    try {
      const stat = statSync3(file);
      if (!stat.isFile()) throw new Error("not a regular file");
      fileSize = stat.size;
    } catch (error) {
      throw new UsageError(`cannot upload ${file}: ${error.message}`);
    }
    const api = context.api();
    const uploader = new DatasetUploader(
      api,
      context.env,
      progressBar(context.io.stderr, basename2(file)),
      (line) => context.warn(line)
    );
    const resume = values["resume"];
    let datasetId = values["dataset"];
    if (resume && !datasetId)
      throw new UsageError("--resume needs --dataset (the dataset the upload belongs to)");
    const uploadPath = "/v2/training/uploads";
    let target;
    let resumeUploadId = resume;
    const remembered = resume ? null : uploader.remembered(file);
    if (remembered && (!datasetId || datasetId === remembered.datasetId)) {
      target = {
        datasetId: remembered.datasetId,
        uploadPath: remembered.uploadPath,
        ...remembered.token ? { token: remembered.token } : {}
      };
      resumeUploadId = remembered.uploadId;
    } else if (datasetId) {
      target = { datasetId, uploadPath };
    } else {
      const format = values["format"] ?? formatOf(file);
      const type = values["type"] ?? typeOf(format);
      if (!type)
        throw new UsageError(
          `give the dataset's --type (text, image, audio, video, structured or multimodal)`
        );
      const created = await api.call("POST", "/v2/training/datasets", {
        body: {
          name: values["name"] ?? basename2(file),
          ...format ? { format } : {},
          type
        }
      });
      datasetId = created.id;
      target = {
        datasetId: created.id,
        uploadPath: created.uploadUrl ? new URL(created.uploadUrl).pathname.replace(/\/+$/, "") : uploadPath,
        ...created.uploadToken ? { token: created.uploadToken } : {}
      };
    }
    const accepted = await uploader.upload(target, {
      file,
      size: fileSize,
      multipartAbove: size(
        values["multipart-above"],
        "multipart-above",
        MULTIPART_ABOVE
      ),
      ...values["part-size"] ? { partSize: size(values["part-size"], "part-size") } : {},
      ...resumeUploadId ? { resumeUploadId } : {}
    });
    let dataset = null;
    if (values["wait"]) {
      dataset = await waitUntil(36e5, async () => {
        const d = await api.call("GET", `/v2/training/datasets/${target.datasetId}`);
        return d.status === "ready" || d.status === "error" ? d : null;
      });
    }
    const result = dataset ?? accepted;
    context.show(
      result,
      () => dataset ? `${dataset.id} ${dataset.status}${dataset.status === "error" ? `: ${JSON.stringify(dataset.error ?? dataset["statusReason"] ?? "")}` : ""}
` : `${target.datasetId} uploaded (${bytes(fileSize)}), processing
`
    );
    if (dataset?.status === "error") {
      throw new CliError(`dataset ${dataset.id} failed processing`, EXIT.jobFailed);
    }
    return EXIT.ok;
  }
};
var datasetCommands = [list2, upload];

// src/commands/endpoints.ts
import { readFileSync as readFileSync3 } from "node:fs";
function jsonBody(values) {
  const file = values["file"];
  const data = values["data"];
  if (file === void 0 && data === void 0) return void 0;
  let text;
  try {
    text = data ?? readFileSync3(file === "-" ? 0 : file, "utf8");
  } catch (error) {
    throw new UsageError(`cannot read ${file}: ${error.message}`);
  }
  try {
    const parsed = JSON.parse(text);
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("not a JSON object");
    return parsed;
  } catch (error) {
    throw new UsageError(`the request body is not a JSON object: ${error.message}`);
  }
}
var BODY_OPTIONS = {
  file: {
    type: "string",
    short: "f",
    description: 'The request body from a JSON file ("-": stdin)',
    value: "path"
  },
  data: { type: "string", short: "d", description: "The request body as JSON text", value: "json" }
};
var list3 = {
  path: ["endpoints", "list"],
  summary: "List serverless endpoints",
  examples: ["anvil endpoints list", "anvil endpoints list --json"],
  async run(context) {
    const api = context.api();
    const all = [];
    for (let offset = 0; ; ) {
      const page = await api.call(
        "GET",
        "/v2/endpoints",
        {
          query: { limit: 100, offset }
        }
      );
      all.push(...page.endpoints);
      offset += page.endpoints.length;
      if (!page.pagination.hasMore || page.endpoints.length === 0) break;
    }
    context.show(
      all,
      () => table(all, [
        { header: "id", value: (e) => e.id },
        { header: "name", value: (e) => e.name },
        { header: "status", value: (e) => e.status },
        { header: "gpus", value: (e) => `${e.gpuCount}x${e.gpuType}` },
        { header: "workers", value: (e) => `${e.workers.ready}/${e.workers.target}` },
        { header: "image", value: (e) => e.image },
        { header: "age", value: (e) => age(e.createdAt) }
      ])
    );
    return EXIT.ok;
  }
};
var create2 = {
  path: ["endpoints", "create"],
  summary: "Create a serverless endpoint",
  description: "Flags build the common body; --file or --data give the whole body of POST /v2/endpoints (flags given too override its fields). --wait waits until a worker is ready (status active).",
  options: {
    name: { type: "string", description: "Name", value: "name" },
    image: { type: "string", description: "Worker image", value: "image" },
    template: { type: "string", description: "Template id", value: "id" },
    "gpu-type": { type: "string", description: "GPU type, e.g. H100", value: "type" },
    "gpu-count": { type: "string", description: "GPUs per worker", value: "n" },
    workers: { type: "string", description: "Worker count", value: "n" },
    "max-concurrency": { type: "string", description: "Jobs per worker at once", value: "n" },
    env: { type: "string", multiple: true, description: "Environment variable", value: "name=value" },
    wait: { type: "boolean", description: "Wait until the endpoint is active" },
    ...BODY_OPTIONS
  },
  examples: [
    "anvil endpoints create --name llm --image my/worker:1 --gpu-type H100 --workers 1 --wait",
    "anvil endpoints create --file endpoint.json"
  ],
  async run(context, { values }) {
    const body2 = jsonBody(values) ?? {};
    const number = (name) => {
      const text = values[name];
      if (text !== void 0 && !/^\d+$/.test(text)) throw new UsageError(`--${name} takes a whole number`);
      return text === void 0 ? void 0 : Number(text);
    };
    const set = (field, value) => {
      if (value !== void 0) body2[field] = value;
    };
    set("name", values["name"]);
    set("image", values["image"]);
    set("templateId", values["template"]);
    set("gpuType", values["gpu-type"]);
    set("gpuCount", number("gpu-count"));
    const configuration = { ...body2["configuration"] ?? {} };
    if (number("workers") !== void 0) configuration["workerCount"] = number("workers");
    if (number("max-concurrency") !== void 0) configuration["maxConcurrency"] = number("max-concurrency");
    const env = envPairs(values["env"]);
    if (env) configuration["environmentVariables"] = env;
    if (Object.keys(configuration).length) body2["configuration"] = configuration;
    if (!body2["name"]) throw new UsageError("--name is required (or a name in --file/--data)");
    const api = context.api();
    let endpoint = await api.call("POST", "/v2/endpoints", { body: body2 });
    if (values["wait"]) {
      const { waitUntil: waitUntil2 } = await Promise.resolve().then(() => (init_wait(), wait_exports));
      const ready = await waitUntil2(6e5, async () => {
        const e = await api.call("GET", `/v2/endpoints/${endpoint.id}`);
        return e.status === "active" || e.status === "error" || e.status === "failed" ? e : null;
      });
      if (!ready) throw new CliError(`endpoint ${endpoint.id} is not active after 600 s`, EXIT.failure);
      if (ready.status !== "active")
        throw new CliError(
          `endpoint ${endpoint.id} is ${ready.status}: ${ready.statusReason ?? ""}`,
          EXIT.jobFailed
        );
      endpoint = ready;
    }
    context.show(endpoint, () => `${endpoint.id} ${endpoint.status}  ${endpoint.url}
`);
    return EXIT.ok;
  }
};
var remove2 = {
  path: ["endpoints", "delete"],
  summary: "Delete an endpoint: its queued jobs are cancelled and its workers removed",
  args: "<endpoint id>",
  arity: [1, 1],
  options: { yes: { type: "boolean", short: "y", description: "Confirm" } },
  examples: ["anvil endpoints delete ep_abc123 --yes"],
  async run(context, { values, positionals }) {
    if (!values["yes"])
      throw new UsageError(`deleting ${positionals[0]} cancels its queued jobs: add --yes to confirm`);
    const result = await context.api().call(
      "DELETE",
      `/v2/endpoints/${encodeURIComponent(positionals[0])}`
    );
    context.show(result, () => `${result.id} deleted (${result.cancelledJobs} queued jobs cancelled)
`);
    return EXIT.ok;
  }
};
var FINAL_FAILURES = /* @__PURE__ */ new Set(["FAILED", "CANCELLED", "TIMED_OUT"]);
var run = {
  path: ["run"],
  summary: "Submit a job to a serverless endpoint",
  args: "<endpoint id> '<json input>'",
  arity: [2, 2],
  description: "Without --sync prints the job id (IN_QUEUE); with --sync waits for the result (runsync, then status-sync while it runs longer) and prints the output; exit 9 when the job ends FAILED, CANCELLED or TIMED_OUT. '-' reads the input from stdin.",
  options: {
    sync: { type: "boolean", short: "s", description: "Wait for the result and print the output" },
    timeout: { type: "string", description: "Seconds --sync waits (default 300)", value: "seconds" }
  },
  examples: [
    `anvil run ep_abc123 '{"prompt":"hello"}' --sync`,
    `anvil run ep_abc123 '{"prompt":"hello"}'   # \u2192 the job id`,
    'anvil run ep_abc123 "$(cat input.json)" --sync --json | jq .output'
  ],
  async run(context, { values, positionals }) {
    const [endpoint, text] = positionals;
    let input;
    try {
      input = JSON.parse(text === "-" ? readFileSync3(0, "utf8") : text);
    } catch (error) {
      throw new UsageError(`the input is not JSON: ${error.message}`);
    }
    const api = context.api();
    const base = `/v2/${encodeURIComponent(endpoint)}`;
    if (!values["sync"]) {
      const job2 = await api.call("POST", `${base}/run`, { body: { input } });
      context.show(job2, () => `${job2.id} ${job2.status}
`);
      return EXIT.ok;
    }
    const timeout = Number(values["timeout"] ?? 300) * 1e3;
    if (!Number.isFinite(timeout) || timeout <= 0) throw new UsageError("--timeout takes seconds");
    const deadline = Date.now() + timeout;
    const wait = () => Math.max(0, Math.min(6e4, deadline - Date.now()));
    let job = await api.call("POST", `${base}/runsync`, {
      body: { input },
      query: { wait: wait() }
    });
    while (!["COMPLETED", ...FINAL_FAILURES].includes(job.status) && Date.now() < deadline) {
      job = await api.call("GET", `${base}/status-sync/${job.id}`, { query: { wait: wait() } });
    }
    context.show(
      job,
      () => job.status === "COMPLETED" ? `${JSON.stringify(job.output)}
` : `${job.id} ${job.status}${job.error ? `: ${JSON.stringify(job.error)}` : ""}
`
    );
    if (FINAL_FAILURES.has(job.status)) return EXIT.jobFailed;
    if (job.status !== "COMPLETED") {
      context.warn(`job ${job.id} is still ${job.status} after ${timeout / 1e3} s`);
      return EXIT.failure;
    }
    return EXIT.ok;
  }
};
var endpointCommands = [list3, create2, remove2, run];

// src/commands/hosts.ts
var COLUMNS2 = [
  { header: "id", value: (h) => h.id },
  { header: "name", value: (h) => h.name },
  { header: "state", value: (h) => `${h.state}${h.cordoned ? ",cordoned" : ""}` },
  { header: "connected", value: (h) => h.connected ? "yes" : "no" },
  {
    header: "gpus",
    value: (h) => `${h.gpus.count}x${[...new Set(h.gpus.models)].join("+") || "-"}${h.gpus.simulated ? " (simulated)" : ""}`
  },
  { header: "memory", value: (h) => h.memoryBytes === null ? null : bytes(h.memoryBytes) },
  { header: "agent", value: (h) => h.agentVersion },
  { header: "heartbeat", value: (h) => h.lastHeartbeatAt ? `${age(h.lastHeartbeatAt)} ago` : null }
];
var list4 = {
  path: ["hosts", "list"],
  summary: "List GPU servers (operators)",
  examples: ["anvil hosts list", "anvil hosts list --json | jq '.[] | select(.connected | not) | .id'"],
  async run(context) {
    const { hosts } = await context.api().call("GET", "/v2/admin/hosts");
    context.show(hosts, () => table(hosts, COLUMNS2));
    return EXIT.ok;
  }
};
var get2 = {
  path: ["hosts", "get"],
  summary: "Show a host with its inventory and workloads (operators)",
  args: "<host id>",
  arity: [1, 1],
  examples: ["anvil hosts get host_abc123 --json"],
  async run(context, { positionals }) {
    const host = await context.api().call(
      "GET",
      `/v2/admin/hosts/${encodeURIComponent(positionals[0])}`
    );
    context.show(
      host,
      () => [
        table([host], COLUMNS2),
        "",
        table(host.workloadList, [
          { header: "workload", value: (w) => w.id },
          { header: "kind", value: (w) => w.kind },
          { header: "phase", value: (w) => w.phase },
          { header: "gpus", value: (w) => w.gpus.join(",") }
        ])
      ].join("\n")
    );
    return EXIT.ok;
  }
};
function hostAction(verb, summary) {
  return {
    path: ["hosts", verb],
    summary,
    args: "<host id>",
    arity: [1, 1],
    options: verb === "uncordon" ? {} : { reason: { type: "string", description: "Why (kept with the host)", value: "text" } },
    examples: [`anvil hosts ${verb} host_abc123${verb === "uncordon" ? "" : " --reason 'disk replacement'"}`],
    async run(context, { values, positionals }) {
      const body2 = values["reason"] ? { reason: values["reason"] } : {};
      const result = await context.api().call(
        "POST",
        `/v2/admin/hosts/${encodeURIComponent(positionals[0])}/${verb}`,
        { body: body2 }
      );
      context.show(result, () => `${positionals[0]} ${verb === "drain" ? "draining" : `${verb}ed`}
`);
      return EXIT.ok;
    }
  };
}
var joinToken = {
  path: ["join-token"],
  summary: "Create a join token for a new GPU server and print the command that joins it (operators)",
  options: {
    uses: {
      type: "string",
      description: "How many servers may join with it (default 1; 0 = any until expiry)",
      value: "n"
    },
    "expires-in": { type: "string", description: "Seconds it stays valid", value: "seconds" },
    description: { type: "string", description: "What it is for", value: "text" }
  },
  examples: ["anvil join-token", "anvil join-token --uses 10 --expires-in 86400 --description rack-4"],
  async run(context, { values }) {
    const whole = (name) => {
      const text = values[name];
      if (text !== void 0 && !/^\d+$/.test(text))
        throw new UsageError(`--${name} takes a whole number, got "${text}"`);
      return text === void 0 ? void 0 : Number(text);
    };
    const uses = whole("uses");
    const expires = whole("expires-in");
    const body2 = {
      ...uses === void 0 ? {} : { maxUses: uses === 0 ? null : uses },
      ...expires === void 0 ? {} : { expiresIn: expires },
      ...values["description"] ? { description: values["description"] } : {}
    };
    const created = await context.api().call(
      "POST",
      "/v2/admin/hosts/join-tokens",
      { body: body2 }
    );
    context.show(
      created,
      () => `Join token ${created.token.id} (shown once):
  ${created.value}
On the GPU server:
  ${created.installCommand}
`
    );
    return EXIT.ok;
  }
};
var hostCommands = [
  list4,
  get2,
  hostAction("cordon", "Stop placing new work on a host (operators)"),
  hostAction("uncordon", "Place work on a host again (operators)"),
  hostAction("drain", "Cordon a host and move its work away (operators)"),
  joinToken
];

// src/sse.ts
async function* readEvents(body2) {
  const decoder = new TextDecoder();
  let buffer = "";
  let event = { id: null, event: "message", data: [] };
  for await (const chunk of body2) {
    buffer += decoder.decode(chunk, { stream: true });
    let newline = buffer.search(/\r?\n/);
    while (newline >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(buffer[newline] === "\r" ? newline + 2 : newline + 1);
      if (line === "") {
        if (event.data.length) yield { id: event.id, event: event.event, data: event.data.join("\n") };
        event = { id: null, event: "message", data: [] };
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") event.data.push(value);
        else if (field === "event") event.event = value;
        else if (field === "id") event.id = value;
      }
      newline = buffer.search(/\r?\n/);
    }
  }
}

// src/commands/logs.ts
function clusterLine(entry, timestamps) {
  const prefix = timestamps ? `${entry.timestamp} ${entry.level.toUpperCase()} [${entry.metadata.stream}] ` : "";
  return `${prefix}${entry.message}
`;
}
var sleep = (ms) => new Promise((resolve2) => setTimeout(resolve2, ms));
var clusterRoutes = (id) => ({
  page: `/v1/clusters/${id}/logs`,
  stream: `/v1/clusters/${id}/logs/stream`,
  streamQuery: (tail, resumed) => resumed ? {} : { tail }
});
var followedRoutes = (page) => ({
  page,
  stream: page,
  streamQuery: (tail, resumed) => resumed ? { follow: true } : { follow: true, limit: tail }
});
async function resourceLogs(context, api, routes, tail, follow, timestamps) {
  if (!follow) {
    const data = await api.call("GET", routes.page, {
      query: { limit: tail, tail: true }
    });
    for (const entry of data.logs)
      context.out(context.jsonOutput ? `${JSON.stringify(entry)}
` : clusterLine(entry, timestamps));
    return EXIT.ok;
  }
  let lastId = null;
  for (let attempt = 0; ; attempt++) {
    try {
      const response = await api.send("GET", routes.stream, {
        query: routes.streamQuery(tail, lastId !== null),
        headers: { accept: "text/event-stream", ...lastId === null ? {} : { "last-event-id": lastId } }
      });
      attempt = 0;
      for await (const event of readEvents(response.body)) {
        if (event.event === "revoked")
          throw new CliError(`log stream ended: access revoked (${event.data})`, EXIT.forbidden);
        if (event.event === "end") return EXIT.ok;
        if (event.event !== "log") continue;
        if (event.id) lastId = event.id;
        const entry = JSON.parse(event.data);
        context.out(context.jsonOutput ? `${event.data}
` : clusterLine(entry, timestamps));
      }
    } catch (error) {
      const transient = !(error instanceof CliError) || error.exitCode === EXIT.unreachable;
      if (!transient) throw error;
      if (attempt >= 5) {
        throw error instanceof CliError ? error : new CliError(`log stream failed: ${error.message}`, EXIT.unreachable);
      }
    }
    await sleep(Math.min(1e3 * 2 ** attempt, 1e4));
  }
}
async function workloadLogs(context, api, workloadId, tail, follow) {
  let after = 0;
  let first = true;
  for (; ; ) {
    const page = await api.call(
      "GET",
      `/v2/admin/workloads/${encodeURIComponent(workloadId)}/logs`,
      {
        query: { after, limit: 1e3 }
      }
    );
    const lines = first && !follow ? page.lines.slice(-tail) : page.lines;
    for (const line of lines)
      context.out(context.jsonOutput ? `${JSON.stringify(line)}
` : `${line.line}
`);
    if (page.lines.length === 1e3) {
      after = page.next;
      continue;
    }
    first = false;
    after = page.next;
    if (!follow) return EXIT.ok;
    await sleep(1e3);
  }
}
function int2(text, fallback) {
  if (text === void 0) return fallback;
  if (!/^\d+$/.test(text)) throw new UsageError(`--tail takes a number of lines, got "${text}"`);
  return Number(text);
}
async function showLogs(context, target, values) {
  const api = context.api();
  const tail = int2(values["tail"], 100);
  const follow = values["follow"] === true;
  try {
    const timestamps = values["timestamps"] === true;
    if (target.startsWith("job_")) {
      const page = `/v2/training/jobs/${encodeURIComponent(target)}/logs`;
      return await resourceLogs(context, api, followedRoutes(page), tail, follow, timestamps);
    }
    const worker = /^(ep_[a-z0-9]+)\/(wl_[a-z0-9]+)$/.exec(target);
    if (worker) {
      const page = `/v2/endpoints/${worker[1]}/workers/${worker[2]}/logs`;
      return await resourceLogs(context, api, followedRoutes(page), tail, follow, timestamps);
    }
    if (target.startsWith("wl_")) return await workloadLogs(context, api, target, tail, follow);
    const cluster = await findCluster(api, target);
    return await resourceLogs(context, api, clusterRoutes(cluster.id), tail, follow, timestamps);
  } catch (error) {
    if (error instanceof ApiFailure && error.status === 403 && target.startsWith("wl_")) {
      context.warn(
        "a bare worker id is read through the operators' workload API: name it as <endpoint>/<worker> (ep_\u2026/wl_\u2026)"
      );
    }
    throw error;
  }
}
var LOG_OPTIONS = {
  follow: {
    type: "boolean",
    short: "f",
    description: "Keep printing new lines as they come (Ctrl-C stops)"
  },
  tail: { type: "string", description: "Lines of history to print first (default 100)", value: "n" },
  timestamps: {
    type: "boolean",
    short: "t",
    description: "Prefix cluster lines with time, level and stream"
  }
};
var logs = {
  path: ["logs"],
  summary: "Print (or follow) the logs of a cluster, a training job or an endpoint worker",
  args: "<cluster|job_\u2026|ep_\u2026/wl_\u2026>",
  arity: [1, 1],
  description: "A cluster (by name or id) streams over Server-Sent Events with -f and resumes after a dropped connection without losing lines; so do a training job (job_\u2026, its rank-0 worker) and an endpoint worker (ep_\u2026/wl_\u2026, the ids `anvil endpoints` and GET /v2/endpoints/{id}/workers show), with the resource\u2019s own permissions. Operators may name a bare workload id (wl_\u2026): the operators' workload route.",
  options: LOG_OPTIONS,
  examples: [
    "anvil logs dev --tail 50",
    "anvil logs dev -f",
    "anvil logs job_abc123 -f",
    "anvil logs ep_abc/wl_def --tail 20",
    "anvil logs dev --json | jq .level"
  ],
  async run(context, { values, positionals }) {
    return showLogs(context, positionals[0], values);
  }
};
var logCommands = [logs];

// src/commands/jobs.ts
var COLUMNS3 = [
  { header: "id", value: (j) => j.id },
  { header: "name", value: (j) => j.name },
  { header: "status", value: (j) => j.status },
  { header: "gpus", value: (j) => `${j.maxWorkers}x${j.gpuType}` },
  {
    header: "progress",
    value: (j) => j.progress?.percentage === void 0 ? null : `${j.progress.percentage}%`
  },
  { header: "age", value: (j) => age(j.createdAt) }
];
var list5 = {
  path: ["jobs", "list"],
  summary: "List training jobs",
  options: { status: { type: "string", description: "Only jobs in this status", value: "status" } },
  examples: ["anvil jobs list", "anvil jobs list --status running --json"],
  async run(context, { values }) {
    const api = context.api();
    const all = [];
    for (let offset = 0; ; ) {
      const page = await api.call(
        "GET",
        "/v2/training/jobs",
        {
          query: { limit: 100, offset, status: values["status"] }
        }
      );
      all.push(...page.jobs);
      offset += page.jobs.length;
      if (page.jobs.length === 0 || offset >= page.pagination.total) break;
    }
    context.show(all, () => table(all, COLUMNS3));
    return EXIT.ok;
  }
};
var create3 = {
  path: ["jobs", "create"],
  summary: "Create a training job from a JSON body (POST /v2/training/jobs)",
  options: BODY_OPTIONS,
  examples: [
    "anvil jobs create --file job.json",
    `anvil jobs create -d '{"name":"ft","modelType":"llm","datasetId":"ds_\u2026","gpuType":"H100","maxWorkers":1,"config":{\u2026}}'`
  ],
  async run(context, { values }) {
    const body2 = jsonBody(values);
    if (!body2) throw new UsageError("give the job as --file <path> or --data <json>");
    const job = await context.api().call("POST", "/v2/training/jobs", { body: body2 });
    context.show(job, () => table([job], COLUMNS3));
    return EXIT.ok;
  }
};
function action(verb, summary) {
  return {
    path: ["jobs", verb],
    summary,
    args: "<job id>",
    arity: [1, 1],
    examples: [`anvil jobs ${verb} job_abc123`],
    async run(context, { positionals }) {
      const id = encodeURIComponent(positionals[0]);
      const job = await context.api().call("POST", `/v2/training/jobs/${id}/${verb}`, { body: {} });
      context.show(job, () => `${job.id ?? positionals[0]} ${job.status ?? verb}
`);
      return EXIT.ok;
    }
  };
}
var logs2 = {
  path: ["jobs", "logs"],
  summary: "Print (or follow) a training job's logs",
  args: "<job id>",
  arity: [1, 1],
  options: LOG_OPTIONS,
  examples: ["anvil jobs logs job_abc123 -f"],
  async run(context, { values, positionals }) {
    return showLogs(context, positionals[0], values);
  }
};
var jobCommands = [
  list5,
  create3,
  action("stop", "Stop a training job (it keeps its checkpoints)"),
  action("resume", "Resume a stopped job from its last checkpoint"),
  logs2
];

// src/commands/keys.ts
var list6 = {
  path: ["keys", "list"],
  summary: "List the account's API keys (never their values)",
  examples: ["anvil keys list"],
  async run(context) {
    const { api_keys: keys } = await context.api().call("GET", "/v2/auth/api-keys");
    context.show(
      keys,
      () => table(keys, [
        { header: "id", value: (k) => k.id },
        { header: "name", value: (k) => k.name },
        { header: "status", value: (k) => k.status },
        { header: "permissions", value: (k) => k.permissions.join(",") },
        { header: "prefix", value: (k) => k.prefix },
        { header: "last used", value: (k) => k.lastUsedAt },
        { header: "expires", value: (k) => k.expiresAt ?? "never" }
      ])
    );
    return EXIT.ok;
  }
};
var create4 = {
  path: ["keys", "create"],
  summary: "Create an API key (its value is printed once)",
  options: {
    name: { type: "string", description: "Name (required)", value: "name" },
    permission: {
      type: "string",
      multiple: true,
      description: "read, write, delete or admin (default: read and write)",
      value: "permission"
    },
    scope: {
      type: "string",
      multiple: true,
      description: "A scope (default: the calling key's)",
      value: "scope"
    },
    "expires-at": { type: "string", description: "ISO 8601 expiry (default: never)", value: "time" },
    type: { type: "string", description: "read, read_write or service", value: "type" }
  },
  examples: [
    "anvil keys create --name ci --permission read --permission write --scope clusters",
    "anvil keys create --name ro --permission read --json | jq -r .value"
  ],
  async run(context, { values }) {
    const name = values["name"];
    if (!name) throw new UsageError("--name is required");
    const body2 = {
      name,
      permissions: values["permission"] ?? ["read", "write"],
      ...values["scope"] ? { scopes: values["scope"] } : {},
      ...values["expires-at"] ? { expiresAt: values["expires-at"] } : {},
      ...values["type"] ? { type: values["type"] } : {}
    };
    const created = await context.api().call("POST", "/v2/auth/api-keys", { body: body2 });
    context.show(
      created,
      () => `${created.key.id} created. Store the key now, it is not shown again:
${created.value}
`
    );
    return EXIT.ok;
  }
};
var revoke = {
  path: ["keys", "revoke"],
  summary: "Revoke an API key: it stops working at once",
  args: "<key id>",
  arity: [1, 1],
  examples: ["anvil keys revoke key_abc123"],
  async run(context, { positionals }) {
    const result = await context.api().call(
      "DELETE",
      `/v2/auth/api-keys/${encodeURIComponent(positionals[0])}`
    );
    context.show(result, () => `${result.message}
`);
    return EXIT.ok;
  }
};
var keyCommands = [list6, create4, revoke];

// src/commands/ssh.ts
import { spawn } from "node:child_process";
import { constants } from "node:os";
var SSH_OPTIONS = {
  identity: { type: "string", short: "i", description: "Private key file for ssh", value: "file" },
  "ssh-option": {
    type: "string",
    short: "o",
    multiple: true,
    description: "An ssh -o option, e.g. StrictHostKeyChecking=accept-new",
    value: "option"
  }
};
function connectionOf(cluster) {
  if (!cluster.ssh_connection) {
    throw new CliError(
      `cluster ${cluster.name} (${cluster.id}) has no SSH: create it with --ssh (ssh_enabled), and it must be running`,
      EXIT.refused
    );
  }
  return cluster.ssh_connection;
}
function sshArgs(values) {
  const args = [];
  if (values["identity"]) args.push("-i", values["identity"]);
  for (const option of values["ssh-option"] ?? []) args.push("-o", option);
  return args;
}
function execSsh(args, binary = "ssh") {
  return new Promise((resolve2, reject) => {
    const child = spawn(binary, args, { stdio: "inherit" });
    const ignore = () => {
    };
    const pass = (signal) => child.kill(signal);
    process.on("SIGINT", ignore);
    process.on("SIGTERM", pass);
    process.on("SIGHUP", pass);
    const release = () => {
      process.off("SIGINT", ignore);
      process.off("SIGTERM", pass);
      process.off("SIGHUP", pass);
    };
    child.on("error", (error) => {
      release();
      reject(
        new CliError(
          error.code === "ENOENT" ? `${binary} is not installed: install OpenSSH's client` : `could not run ${binary}: ${error.message}`,
          EXIT.failure
        )
      );
    });
    child.on("exit", (code2, signal) => {
      release();
      resolve2(code2 ?? 128 + (signal ? constants.signals[signal] ?? 1 : 1));
    });
  });
}
var ssh = {
  path: ["ssh"],
  summary: "Open a shell (or run a command) in a cluster over the control plane's SSH relay",
  args: "<cluster> [command...]",
  arity: [1, Number.POSITIVE_INFINITY],
  passThrough: true,
  description: "Runs the system ssh against the relay with the cluster as user (ssh -p <port> <cluster id>@<host>), so your ssh keys, agent and config apply; add your public key once with POST /v2/accounts/profile/ssh-keys. Everything after the cluster is the remote command. Exits with the remote command's status.",
  options: SSH_OPTIONS,
  examples: [
    "anvil ssh dev",
    "anvil ssh dev nvidia-smi",
    "anvil ssh -i ~/.ssh/work dev -- 'cd /workspace && ls -la'"
  ],
  async run(context, { values, positionals }) {
    const [name, ...remote] = positionals;
    const target = connectionOf(await findCluster(context.api(), name));
    const args = ["-p", String(target.port), ...sshArgs(values), `${target.username}@${target.host}`];
    if (remote.length) args.push("--", ...remote);
    return execSsh(args, context.env["ANVIL_SSH_BINARY"] || "ssh");
  }
};
function hostAlias(name) {
  return name.replace(/[^A-Za-z0-9._-]+/g, "-");
}
function sshConfigBlock(cluster, identity) {
  const c = connectionOf(cluster);
  const aliases = [.../* @__PURE__ */ new Set([hostAlias(cluster.name), cluster.id])].join(" ");
  const lines = [
    `# Anvil cluster ${cluster.name} (${cluster.id})`,
    `Host ${aliases}`,
    `  HostName ${c.host}`,
    `  Port ${c.port}`,
    `  User ${c.username}`
  ];
  if (identity) lines.push(`  IdentityFile ${identity}`, "  IdentitiesOnly yes");
  return `${lines.join("\n")}
`;
}
var sshConfig = {
  path: ["ssh-config"],
  summary: "Print ssh Host blocks for your clusters, for ~/.ssh/config",
  args: "[cluster...]",
  arity: [0, Number.POSITIVE_INFINITY],
  description: "One block per cluster with SSH (all, or the ones named), named by cluster name and id, so ssh, scp, rsync and VS Code Remote-SSH reach a cluster by its name.",
  options: {
    identity: { type: "string", short: "i", description: "Add IdentityFile to each block", value: "file" }
  },
  examples: [
    "anvil ssh-config >> ~/.ssh/config",
    "anvil ssh-config dev > ~/.ssh/config.d/anvil && ssh dev",
    "rsync -av ./data/ dev:/workspace/data/"
  ],
  async run(context, { values, positionals }) {
    const api = context.api();
    const clusters = positionals.length ? await Promise.all(positionals.map((n) => findCluster(api, n))) : (await listClusters(api)).filter((c) => c.ssh_connection);
    const identity = values["identity"];
    context.show(
      clusters.map((c) => ({ name: c.name, id: c.id, ...connectionOf(c) })),
      () => clusters.map((c) => sshConfigBlock(c, identity)).join("\n")
    );
    return EXIT.ok;
  }
};
function parseForward(spec) {
  const match = /^(\d{1,5}):(\d{1,5})$/.exec(spec) ?? /^(\d{1,5})$/.exec(spec);
  const local = Number(match?.[1]);
  const remote = Number(match?.[2] ?? match?.[1]);
  if (!match || local > 65535 || remote < 1 || remote > 65535) {
    throw new UsageError(
      `port-forward takes <local port>:<cluster port> (or one port for both), got "${spec}"`
    );
  }
  return { local, remote };
}
var portForward = {
  path: ["port-forward"],
  summary: "Listen on a local port and forward it to a cluster's port",
  args: "<cluster> <local>:<remote>",
  arity: [2, 2],
  description: "A local TCP listener (on 127.0.0.1, or --address) whose connections reach the cluster's port through the SSH relay's port forwarding (ssh -N -L): any TCP protocol works, not only HTTP, and the relay's SSH authorisation applies. The server in the container must listen on 0.0.0.0. Stops on Ctrl-C. For HTTP ports mapped with --port, the HTTPS proxy (the cluster's proxy_url) needs no forward at all.",
  options: {
    ...SSH_OPTIONS,
    address: { type: "string", description: "Local address to listen on (default 127.0.0.1)", value: "ip" }
  },
  examples: [
    "anvil port-forward dev 8888:8888   # Jupyter on http://localhost:8888",
    "anvil port-forward dev 5433:5432"
  ],
  async run(context, { values, positionals }) {
    const { local, remote } = parseForward(positionals[1]);
    const target = connectionOf(await findCluster(context.api(), positionals[0]));
    const address = values["address"] ?? "127.0.0.1";
    const bind = address.includes(":") ? `[${address}]` : address;
    context.warn(`forwarding ${address}:${local} to port ${remote} of ${positionals[0]} (Ctrl-C to stop)`);
    return execSsh(
      [
        "-N",
        "-o",
        "ExitOnForwardFailure=yes",
        "-L",
        `${bind}:${local}:localhost:${remote}`,
        "-p",
        String(target.port),
        ...sshArgs(values),
        `${target.username}@${target.host}`
      ],
      context.env["ANVIL_SSH_BINARY"] || "ssh"
    );
  }
};
var sshCommands = [ssh, sshConfig, portForward];

// src/commands/index.ts
var COMMANDS = [
  ...authCommands,
  ...clusterCommands,
  ...sshCommands,
  ...logCommands,
  ...endpointCommands,
  ...jobCommands,
  ...datasetCommands,
  ...keyCommands,
  ...hostCommands,
  completionCommand,
  completeCommand(() => COMMANDS)
];

// src/help.ts
var GLOBALS = `Global options:
  --json              Print the API answer as JSON (for scripts)
  -p, --profile NAME  Use this named profile (default: ANVIL_PROFILE, else the one of the last login)
  -h, --help          Show help`;
var EXIT_CODES_HELP = `Exit codes:
  0  success                      5  not found (404)
  1  failure (5xx, unexpected)    6  refused: invalid input or state (400, 409, 413, 422)
  2  bad command line             7  rate limited (429)
  3  not logged in / key refused  8  control plane unreachable
  4  forbidden (403)              9  the job or upload ran and failed
  anvil ssh exits with the remote command's status (255: ssh itself failed).`;
var ENVIRONMENT = `Environment:
  ANVIL_URL, ANVIL_API_KEY  override the profile's control plane and key
  ANVIL_PROFILE             the profile to use when --profile is not given
  XDG_CONFIG_HOME           profiles live in $XDG_CONFIG_HOME/anvil/config.json (default ~/.config)`;
function usageOf(command) {
  return `anvil ${command.path.join(" ")}${command.options ? " [options]" : ""}${command.args ? ` ${command.args}` : ""}`;
}
function optionLines(options) {
  const left = Object.entries(options).map(([name, spec]) => {
    const short = spec.short ? `-${spec.short}, ` : "    ";
    const value = spec.type === "string" ? ` ${(spec.value ?? "value").toUpperCase()}` : "";
    return `${short}--${name}${value}`;
  });
  const width = Math.max(...left.map((l) => l.length)) + 2;
  return Object.values(options).map(
    (spec, i) => `  ${left[i].padEnd(width)}${spec.description}${spec.multiple ? " (repeatable)" : ""}`
  );
}
function commandHelp(command) {
  const parts = [`Usage: ${usageOf(command)}`, "", command.summary];
  if (command.description) parts.push("", command.description);
  if (command.options) parts.push("", "Options:", ...optionLines(command.options));
  parts.push("", GLOBALS);
  if (command.examples.length) parts.push("", "Examples:", ...command.examples.map((e) => `  ${e}`));
  return `${parts.join("\n")}
`;
}
function listing(commands) {
  const width = Math.max(...commands.map((c) => c.path.join(" ").length)) + 2;
  return commands.map((c) => `  ${c.path.join(" ").padEnd(width)}${c.summary}`);
}
function groupHelp(words) {
  const commands = COMMANDS.filter((c) => words.every((w, i) => c.path[i] === w));
  return `Usage: anvil ${words.join(" ")} <command>

Commands:
${listing(commands).join("\n")}

Run anvil ${words.join(" ")} <command> --help for its options and examples.
`;
}
function mainHelp() {
  return `anvil: the command-line client of an Anvil GPU cloud

Usage: anvil <command> [options]

Commands:
${listing(COMMANDS.filter((c) => !c.path[0].startsWith("__"))).join("\n")}

${GLOBALS}

${EXIT_CODES_HELP}

${ENVIRONMENT}

Examples:
  anvil login --url https://anvil.example.com --key anv_live_\u2026
  anvil clusters create --name dev --image pytorch/pytorch --gpu-type H100 --ssh
  anvil ssh dev nvidia-smi
  anvil ssh-config >> ~/.ssh/config && scp model.bin dev:/workspace/
  anvil clusters list --json | jq -r '.[].id'

Run anvil <command> --help for a command's options and examples.
`;
}

// src/cli.ts
var GLOBAL_OPTIONS = {
  json: { type: "boolean", description: "Print the API answer as JSON (for scripts)" },
  profile: { type: "string", short: "p", description: "Use this named profile", value: "name" },
  help: { type: "boolean", short: "h", description: "Show help" }
};
function findCommand(argv) {
  const words = [];
  const rest = [];
  let i = 0;
  for (; i < argv.length; i++) {
    const token = argv[i];
    if (token === "--") break;
    if (token.startsWith("-")) {
      rest.push(token);
      if ((token === "--profile" || token === "-p") && i + 1 < argv.length) rest.push(argv[++i]);
      continue;
    }
    const candidate = [...words, token];
    if (!COMMANDS.some((c) => startsWith(c.path, candidate))) break;
    words.push(token);
  }
  const command = COMMANDS.find((c) => sameWords(c.path, words)) ?? null;
  return { command, words, rest: [...rest, ...argv.slice(i)] };
}
var startsWith = (path, prefix) => prefix.every((word, i) => path[i] === word);
var sameWords = (a, b) => a.length === b.length && startsWith(a, b);
function parse(command, tokens) {
  const specs = { ...GLOBAL_OPTIONS, ...command.options };
  const options = Object.fromEntries(
    Object.entries(specs).map(([name, spec]) => [
      name,
      {
        type: spec.type,
        ...spec.short ? { short: spec.short } : {},
        ...spec.multiple ? { multiple: true } : {}
      }
    ])
  );
  let own = tokens;
  let passed = [];
  if (command.passThrough) {
    const split = firstPositional(tokens, specs);
    own = tokens.slice(0, split + 1);
    passed = tokens.slice(split + 1);
    if (passed[0] === "--") passed = passed.slice(1);
  }
  let parsed;
  try {
    parsed = parseArgs({ args: own, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError(
      `${error.message.split("\n")[0]} (see anvil ${command.path.join(" ")} --help)`
    );
  }
  const { json: json2, profile, help, ...values } = parsed.values;
  return {
    values,
    positionals: [...parsed.positionals, ...passed],
    globals: { json: json2, profile, help }
  };
}
function firstPositional(tokens, specs) {
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i];
    if (token === "--") return Math.min(i + 1, tokens.length);
    if (!token.startsWith("-") || token === "-") return i;
    if (token.includes("=")) continue;
    const name = token.startsWith("--") ? token.slice(2) : Object.entries(specs).find(([, spec]) => spec.short === token.slice(1))?.[0];
    if (name && specs[name]?.type === "string") i += 1;
  }
  return tokens.length;
}
async function runCli(argv, io) {
  const { command, words, rest } = findCommand(argv);
  const wantsHelp = rest.includes("--help") || rest.includes("-h");
  try {
    if (!command) {
      if (words.length === 0 && argv.filter((a) => !a.startsWith("-")).length === 0) {
        io.stdout.write(mainHelp());
        return wantsHelp || argv.length === 0 ? EXIT.ok : EXIT.usage;
      }
      if (words.length > 0 && (wantsHelp || rest.length === 0)) {
        io.stdout.write(groupHelp(words));
        return wantsHelp ? EXIT.ok : EXIT.usage;
      }
      const unknown = [...words, rest.find((a) => !a.startsWith("-")) ?? ""].join(" ").trim();
      throw new UsageError(`unknown command "${unknown}" (see anvil --help)`);
    }
    const own = command.passThrough ? rest.slice(0, firstPositional(rest, { ...GLOBAL_OPTIONS, ...command.options }) + 1) : rest;
    if (own.includes("--help") || own.includes("-h")) {
      io.stdout.write(commandHelp(command));
      return EXIT.ok;
    }
    const input = parse(command, rest);
    const [min, max] = command.arity ?? [0, 0];
    if (input.positionals.length < min || input.positionals.length > max) {
      throw new UsageError(
        `anvil ${command.path.join(" ")} takes ${command.args ?? "no arguments"} (see anvil ${command.path.join(" ")} --help)`
      );
    }
    const context = new Context(
      io,
      input.globals["json"] === true,
      input.globals["profile"]
    );
    return await command.run(context, input) ?? EXIT.ok;
  } catch (error) {
    return report(io, error);
  }
}
function report(io, error) {
  if (error instanceof CliError) {
    io.stderr.write(`anvil: ${error.message}
`);
    return error.exitCode;
  }
  io.stderr.write(`anvil: unexpected error: ${error?.message ?? String(error)}
`);
  return EXIT.failure;
}

// src/main.ts
var code = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  env: process.env
});
process.stdout.write("", () => process.exit(code));
