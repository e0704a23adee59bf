export * from './api-usage.ts';
export * from './request-log.ts';
