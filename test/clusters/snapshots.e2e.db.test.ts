import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call } from '../../control-plane/src/testing/accounts.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { type ClusterFleet, startClusterFleet, waitFor } from './harness.ts';

/**
 * delete_snapshots on DELETE /v1/clusters/{id}, with a real agent and Docker: the snapshots earlier stops
 * committed are removed from the host, the final snapshot of the same delete is kept, and without the
 * flag every snapshot stays.
 */
describe.skipIf(!dockerOrFail('test/clusters/snapshots.e2e.db.test.ts'))(
  'cluster snapshots on delete, with a real agent and Docker',
  () => {
    let fleet: ClusterFleet;
    const clusters: string[] = [];

    beforeAll(async () => {
      fleet = await startClusterFleet();
      await call(fleet.t, {
        method: 'POST',
        url: '/v2/auth/temporary-boost',
        payload: { multiplier: 10, duration: '1h', reason: 'tests' },
      });
    }, 300_000);

    afterAll(async () => {
      await fleet?.close();
      for (const id of clusters) {
        const images = await fleet.docker.listImages({
          filters: { reference: [`anvil-snapshots/${fleet.t.accountId}/${id}`] },
        });
        for (const image of images)
          await fleet.docker
            .getImage(image.Id)
            .remove({ force: true })
            .catch(() => {});
      }
    });

    const get = async (id: string) => (await call(fleet.t, { url: `/v1/clusters/${id}` })).json().data;
    const running = (id: string) =>
      waitFor(`${id} running`, async () => (await get(id))?.status === 'running', 240_000);
    const tagsOf = async (id: string) =>
      (
        await fleet.docker.listImages({
          filters: { reference: [`anvil-snapshots/${fleet.t.accountId}/${id}`] },
        })
      )
        .flatMap((i) => i.RepoTags ?? [])
        .sort();
    const create = async (name: string) => {
      const r = await call(fleet.t, {
        method: 'POST',
        url: '/v1/clusters',
        payload: {
          name,
          docker_image: BUSYBOX_IMAGE,
          gpu_type: 'H100',
          cpu_cores: 1,
          memory_gb: 1,
          storage_gb: 1,
          command: 'trap "exit 0" TERM; while true; do sleep 1; done',
        },
      });
      expect(r.statusCode, r.body).toBe(201);
      const id = r.json().data.id as string;
      clusters.push(id);
      await running(id);
      return id;
    };
    /** Stop with save_state (a docker commit on the host), and wait until stopped. */
    const stopWithSnapshot = async (id: string, name: string) => {
      const r = await call(fleet.t, {
        method: 'POST',
        url: `/v1/clusters/${id}/stop`,
        payload: { save_state: true, snapshot_name: name, wait_for_completion: true, timeout_minutes: 2 },
      });
      expect(r.statusCode, r.body).toBe(200);
      expect(r.json().data.snapshot_creation).toMatchObject({
        snapshot_name: `anvil-snapshots/${fleet.t.accountId}/${id}:${name}`,
      });
      return r.json().data.snapshot_creation.snapshot_id as string;
    };
    const remove = async (id: string, options: Record<string, unknown>) => {
      const r = await call(fleet.t, {
        method: 'DELETE',
        url: `/v1/clusters/${id}`,
        payload: { confirm_deletion: 'DELETE', wait_for_completion: true, force: true, ...options },
      });
      expect(r.statusCode, r.body).toBe(200);
      return r.json().data;
    };

    it('removes the earlier snapshots and keeps the final one when asked; keeps them all otherwise', {
      timeout: 600_000,
    }, async () => {
      // Two clusters side by side (the host has two GPUs), each stopped once with its state saved.
      const [doomed, kept] = await Promise.all([create('doomed'), create('kept')]);
      const [first, keptSnapshot] = await Promise.all([
        stopWithSnapshot(doomed, 'first'),
        stopWithSnapshot(kept, 'only'),
      ]);
      // The doomed cluster runs and stops again: a second snapshot.
      expect((await call(fleet.t, { method: 'POST', url: `/v1/clusters/${doomed}/start` })).statusCode).toBe(
        200,
      );
      await running(doomed);
      const second = await stopWithSnapshot(doomed, 'second');
      expect(await tagsOf(doomed)).toEqual([
        `anvil-snapshots/${fleet.t.accountId}/${doomed}:first`,
        `anvil-snapshots/${fleet.t.accountId}/${doomed}:second`,
      ]);

      // delete_snapshots with a final snapshot: the earlier two go, the final one stays.
      await call(fleet.t, { method: 'POST', url: `/v1/clusters/${doomed}/start` });
      await running(doomed);
      const deleted = await remove(doomed, {
        delete_snapshots: true,
        create_final_snapshot: true,
        snapshot_name: 'final',
      });
      expect(deleted.status).toBe('deleted');
      const finalId = deleted.final_snapshot.snapshot_id as string;
      expect(finalId).toMatch(/^sha256:/);
      expect(deleted.snapshot_cleanup).toMatchObject({
        requested: true,
        done: true,
        failed: [],
        error: null,
      });
      expect(
        deleted.snapshot_cleanup.removed.map((i: { image_id: string; names: string[] }) => [
          i.image_id,
          i.names,
        ]),
      ).toEqual(
        expect.arrayContaining([
          [first, [`anvil-snapshots/${fleet.t.accountId}/${doomed}:first`]],
          [second, [`anvil-snapshots/${fleet.t.accountId}/${doomed}:second`]],
        ]),
      );
      expect(deleted.snapshot_cleanup.removed).toHaveLength(2);
      expect(deleted.snapshot_cleanup.kept).toEqual([
        { image_id: finalId, names: [`anvil-snapshots/${fleet.t.accountId}/${doomed}:final`] },
      ]);
      expect(await tagsOf(doomed)).toEqual([`anvil-snapshots/${fleet.t.accountId}/${doomed}:final`]);
      for (const id of [first, second]) await expect(fleet.docker.getImage(id).inspect()).rejects.toThrow();
      expect((await fleet.docker.getImage(finalId).inspect()).Id).toBe(finalId);

      // Without delete_snapshots (preserve_snapshots defaults to true) the snapshot stays.
      const plain = await remove(kept, {});
      expect(plain.snapshot_cleanup).toMatchObject({ requested: false, removed: [], kept: [] });
      expect(await tagsOf(kept)).toEqual([`anvil-snapshots/${fleet.t.accountId}/${kept}:only`]);
      expect((await fleet.docker.getImage(keptSnapshot).inspect()).Id).toBe(keptSnapshot);
    });
  },
);
