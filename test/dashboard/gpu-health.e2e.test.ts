import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/app.ts';
import {
  connectGpuAgent,
  type GpuTestAgent,
  gpuHealth,
  gpuSample,
  healthReason,
  realGpuInventory,
} from '../../control-plane/src/testing/gpu-agent.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { browserOrFail, launchChromium } from './browser.ts';

vi.setConfig({ testTimeout: 240_000, hookTimeout: 240_000 });

const canRun = browserOrFail('dashboard GPU health tests');

/**
 * The host page's GPU health section in a real Chromium: a hand-driven agent with real (not simulated)
 * GPUs reports one failed over the real WebSocket; the page shows the state and reasons, and its reset
 * button clears it. No Docker needed: nothing runs on the host.
 */
describe.skipIf(!canRun)('dashboard: GPU health on the host page', () => {
  let t: TestApp;
  let url: string;
  let browser: Browser;
  let agent: GpuTestAgent;

  beforeAll(async () => {
    t = await createTestApp({ env: { ANVIL_HOST_GRACE_SECONDS: '3600' } });
    url = await t.app.listen({ host: '127.0.0.1', port: 0 });
    browser = await launchChromium();
  });

  afterAll(async () => {
    agent?.close();
    await browser?.close();
    await t?.close();
  });

  it('shows each GPU health with its reasons, the missing NVIDIA runtime, and resets a failed GPU', async () => {
    const inv = realGpuInventory(
      [{ name: 'NVIDIA H100 80GB HBM3' }, { name: 'NVIDIA H100 80GB HBM3' }],
      false,
    );
    agent = await connectGpuAgent(t, url, inv);
    const xid = healthReason('xid_79', 'failed', 'nvmlEventSetWait_v2');
    agent.sendGpus([
      gpuSample(inv, 0, gpuHealth('healthy')),
      gpuSample(inv, 1, gpuHealth('failed', [xid], [79])),
    ]);
    await waitFor('GPU 1 failed', async () => {
      const row = await t.context.db.prisma.hostGpuHealth.findFirst({
        where: { hostId: agent.hostId, gpuIndex: 1 },
      });
      return row?.state === 'failed';
    });

    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(error.message));
    await page.goto(`${url}/dashboard`);
    await page.fill('[data-form="sign-in"] input[name="key"]', t.ownerKey);
    await page.click('[data-form="sign-in"] button[type="submit"]');
    await page.locator(`[data-host="${agent.hostId}"] a`).click();
    const section = page.locator('[data-section="gpu-health"]');
    await section.waitFor();
    // Docker has no NVIDIA runtime here: the page says what to install.
    expect(await section.locator('[data-gpu-work="refused"]').textContent()).toContain(
      'nvidia-ctk runtime configure',
    );
    const failed = section.locator('tr[data-gpu-health="1"]');
    expect(await failed.getAttribute('data-state')).toBe('failed');
    const text = await failed.textContent();
    expect(text).toContain('H100 SXM');
    expect(text).toContain('xid_79');
    expect(text).toContain('nvmlEventSetWait_v2');
    expect(await section.locator('tr[data-gpu-health="0"]').getAttribute('data-state')).toBe('healthy');

    await failed.locator('[data-action="reset-health"]').click();
    await expect
      .poll(() => section.locator('tr[data-gpu-health="1"]').getAttribute('data-state'))
      .toBe('healthy');
    const row = await t.context.db.prisma.hostGpuHealth.findFirstOrThrow({
      where: { hostId: agent.hostId, gpuIndex: 1 },
    });
    expect([row.state, row.resetBy]).toEqual(['healthy', t.userId]);
    expect(errors).toEqual([]);
    await page.close();
  });
});
