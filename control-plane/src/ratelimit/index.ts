export * from './boosts.ts';
export * from './counter-store.ts';
export * from './limiter.ts';
export * from './policy.ts';
export * from './service.ts';
