export { type Agent, type AgentOptions, createAgent } from './agent.ts';
export { type Clock, systemClock } from './clock.ts';
export { type AgentConfig, loadConfig } from './config.ts';
export {
  type CredentialStore,
  fileCredentialStore,
  type HostCredential,
} from './connection/credential-store.ts';
export { type Dialer, type Transport, wsDialer } from './connection/transport.ts';
export { type ContainerRuntime, createContainerRuntime } from './docker/runtime.ts';
export { FatalAgentError } from './errors.ts';
export { createGpuProvider, type GpuProvider } from './gpu/provider.ts';
export { type HostProvider, systemHost } from './host/provider.ts';
export { createLogger } from './logger.ts';
export { AGENT_VERSION } from './version.ts';
