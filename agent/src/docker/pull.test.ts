import { describe, expect, it } from 'vitest';
import { normaliseImageRef } from './pull.ts';

describe('normaliseImageRef', () => {
  it.each([
    ['busybox', 'busybox:latest'],
    ['busybox:1.36', 'busybox:1.36'],
    ['registry:5000/team/app', 'registry:5000/team/app:latest'],
    ['registry:5000/team/app:v2', 'registry:5000/team/app:v2'],
    ['app@sha256:abc', 'app@sha256:abc'],
  ])('%s -> %s', (input, expected) => {
    expect(normaliseImageRef(input)).toBe(expected);
  });
});
