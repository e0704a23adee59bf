import { describe, expect, it } from 'vitest';
import { Signal } from './signal.ts';

describe('Signal', () => {
  it('tells every listener, in order, with the value, until each unsubscribes', () => {
    const heard: string[] = [];
    const signal = new Signal<string>();
    signal.notify('before anyone listens');
    const stopFirst = signal.listen((value) => heard.push(`first ${value}`));
    signal.listen((value) => heard.push(`second ${value}`));
    signal.notify('a');
    stopFirst();
    signal.notify('b');
    expect(heard).toEqual(['first a', 'second a', 'second b']);
  });
});
