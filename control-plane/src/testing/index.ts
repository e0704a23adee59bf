export * from './app.ts';
export * from './clock.ts';
export * from './cluster-row.ts';
export * from './database.ts';
export * from './gpu-agent.ts';
export * from './process.ts';
export * from './wait.ts';
export * from './workload-spec.ts';
