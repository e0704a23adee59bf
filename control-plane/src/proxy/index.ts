export { LOGIN_PATH, parseProxyHost } from './gateway.ts';
export { PROXY_VERSION, ProxyService, proxyViewPart } from './service.ts';
export { certificateInfo, loadProxyTls } from './tls.ts';
