import type { Api } from './api.ts';

/** One screen of the dashboard. `refresh` re-reads what it shows; the shell calls it every few seconds. */
export interface View {
  readonly title: string;
  readonly element: HTMLElement;
  refresh(): Promise<void>;
}

export interface ViewContext {
  api: Api;
  /** Shows a short message in the shell's status line (an action's result or failure). */
  notify(message: string, kind?: 'info' | 'error'): void;
}
