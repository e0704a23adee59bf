export * from './app.ts';
export * from './database.ts';
