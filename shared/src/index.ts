export * from './api-keys.ts';
export * from './auth.ts';
export * from './errors.ts';
export * from './gpu-boards.ts';
export * from './ids.ts';
