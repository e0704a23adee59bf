/**
 * The agent daemon: `npm run agent -- --control-plane <url> --join-token <token>`.
 * Configuration and its precedence are described in config.ts and agent/README.md.
 * Exit codes: 0 stopped by a signal or to run a new version after an upgrade (systemd's Restart=always
 * starts it again), 1 refused by the control plane (bad or used-up join token,
 * revoked credential, incompatible protocol), 2 bad configuration.
 */
import Dockerode from 'dockerode';
import { pino } from 'pino';
import { createAgent } from './agent.ts';
import { ConfigError, directPortsOf, loadConfig, type ProbeConfig, USAGE } from './config.ts';
import { createContainerRuntime } from './docker/runtime.ts';
import { errorMessage, FatalAgentError } from './errors.ts';
import { probeGpus } from './gpu/probe.ts';
import { createGpuProvider } from './gpu/provider.ts';
import { systemHost } from './host/provider.ts';
import { createLogger } from './logger.ts';
import { createSelfUpgrader, currentTarget } from './upgrade/self-upgrade.ts';
import { AGENT_VERSION } from './version.ts';

/** The one human line on stderr for an operator; the structured log has the details. */
function fail(message: string): void {
  process.stderr.write(`anvil-agent: ${message}\n`);
}

async function main(): Promise<number> {
  let loaded: Awaited<ReturnType<typeof loadConfig>>;
  try {
    loaded = await loadConfig({ argv: process.argv.slice(2), env: process.env });
  } catch (err) {
    fail(err instanceof ConfigError ? err.message : `configuration: ${errorMessage(err)}`);
    return 2;
  }
  if (loaded.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (loaded.probe) return probe(loaded.probe);
  const { config } = loaded;
  const logger = createLogger(config.logLevel);
  logger.info(
    {
      version: AGENT_VERSION,
      controlPlane: config.controlPlane,
      stateDir: config.stateDir,
      dockerHost: process.env['DOCKER_HOST'] ?? null,
      installDir: config.installDir,
      current: config.installDir ? await currentTarget(config.installDir) : null,
    },
    'anvil agent starting',
  );
  if (config.hostImages.length > 0) {
    logger.warn(
      { hostImages: config.hostImages },
      'HOST IMAGES: these images run for EVERY account without a pull; only list images you loaded and trust',
    );
  }

  // Dockerode reads DOCKER_HOST (unix://, tcp://, ssh://) and DOCKER_TLS_VERIFY itself.
  const docker = new Dockerode();
  const runtime = createContainerRuntime(docker);
  const gpu = await createGpuProvider({
    simulate: config.simulateGpus,
    simulateSeed: config.stateDir,
    ...(config.nvmlLibrary ? { nvmlLibrary: config.nvmlLibrary } : {}),
    logger,
  });
  const abort = new AbortController();
  const agent = createAgent({
    controlPlaneUrl: config.controlPlane,
    allowInsecureControlPlane: config.allowInsecureControlPlane,
    joinToken: config.joinToken,
    stateDir: config.stateDir,
    volumeRoot: config.volumeRoot,
    hostImages: config.hostImages,
    runtime,
    docker,
    gpu,
    host: systemHost,
    logger,
    directPorts: directPortsOf(config),
    upgrader: config.installDir
      ? createSelfUpgrader({
          installDir: config.installDir,
          controlPlaneUrl: config.controlPlane,
          currentVersion: AGENT_VERSION,
        })
      : null,
    onUpgraded: (result) => {
      logger.info({ ...result }, 'stopping to run the new version; containers keep running');
      abort.abort();
    },
    rendezvousAddress: config.rendezvousAddress,
    workerApi: config.workerApiPort > 0 ? { port: config.workerApiPort } : null,
  });

  abort.signal.addEventListener('abort', () => gpu.close?.(), { once: true });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      logger.info({ signal }, 'stopping; containers keep running');
      abort.abort();
    });
  }
  try {
    await agent.run(abort.signal);
    logger.info('agent stopped');
    return 0;
  } catch (err) {
    if (err instanceof FatalAgentError) {
      logger.fatal({ code: err.code }, err.message);
      fail(err.message);
      return 1;
    }
    logger.fatal({ err: errorMessage(err) }, 'agent failed');
    fail(errorMessage(err));
    return 1;
  }
}

/** `--probe`: the GPU inventory and one sample as JSON on stdout (logs on stderr), then exit. */
async function probe(options: ProbeConfig): Promise<number> {
  const logger = createLogger(options.logLevel, pino.destination(2));
  const report = await probeGpus({
    createProvider: () =>
      createGpuProvider({
        simulate: options.simulateGpus,
        simulateSeed: options.stateDir,
        ...(options.nvmlLibrary ? { nvmlLibrary: options.nvmlLibrary } : {}),
        logger,
      }),
  });
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  return 0;
}

main().then(
  // Exit explicitly: a pending socket or timer of a failed start must not keep a refused agent alive.
  (code) => process.exit(code),
  (err: unknown) => {
    fail(errorMessage(err));
    process.exit(1);
  },
);
