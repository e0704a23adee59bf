import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger as agentLogger } from '../../agent/src/logger.ts';
import { createLogger as controlPlaneLogger } from '../../control-plane/src/logger.ts';
import { addAccount, call, type TestMember } from '../../control-plane/src/testing/accounts.ts';
import { type ClusterFleet, startClusterFleet, waitFor } from '../clusters/harness.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { uniqueImage } from '../fixtures/images/unique.ts';
import {
  type HeldRegistry,
  holdBlobs,
  REGISTRY_BINARY,
  startRegistry,
  type TestRegistry,
} from '../fixtures/registry.ts';

/**
 * Images an account may run, with a real registry (Debian's docker-registry, htpasswd auth) on loopback
 * behind a proxy that holds blob downloads until released: the account's registry credentials from its
 * settings reach the pull; a pull is made before every create, so an image already on the host does not
 * let another account run it; the bytes of a pull under way show on the cluster; a refused pull puts the
 * cluster in error with the registry's reason; the password appears in no log line and no API answer;
 * snapshots are usable only by their own account.
 */
describe.skipIf(!dockerOrFail('test/images/registry.e2e.db.test.ts') || !existsSync(REGISTRY_BINARY))(
  'images and registries, with a real registry',
  () => {
    const run = randomBytes(4).toString('hex');
    const password = `pw-${randomBytes(12).toString('hex')}`;
    const logs: string[] = [];
    const sink = () =>
      new Writable({
        write(chunk, _encoding, done) {
          logs.push(chunk.toString());
          done();
        },
      });
    let fleet: ClusterFleet;
    let registry: TestRegistry;
    let held: HeldRegistry;
    let other: TestMember;
    let image: string;
    const clusters: string[] = [];
    const owners = new Map<string, TestMember | undefined>();

    beforeAll(async () => {
      fleet = await startClusterFleet(
        {},
        { controlPlane: controlPlaneLogger('debug', sink()), agent: agentLogger('debug', sink()) },
      );
      registry = await startRegistry('anvil-bot', password);
      // An image with a layer of its own (1 MiB of random bytes over busybox) in a private repository,
      // then gone from the host: its pull must download that layer, through the holding proxy.
      const local = await uniqueImage(fleet.docker, `anvil-test/unique-${run}`, 1024 * 1024);
      await registry.push(fleet.docker, local, `private-${run}/busybox`, 'v1');
      await fleet.docker.getImage(local).remove({ force: true });
      held = await holdBlobs(registry.address, 64 * 1024);
      image = `${held.address}/private-${run}/busybox:v1`;
      other = await addAccount(fleet.t, 'Tenant B');
      for (const key of [undefined, other]) {
        const r = await call(fleet.t, {
          method: 'POST',
          url: '/v2/auth/temporary-boost',
          payload: { multiplier: 10, duration: '1h', reason: 'tests' },
          ...(key ? { key } : {}),
        });
        expect(r.statusCode, r.body).toBeLessThan(300);
      }
    }, 300_000);

    afterAll(async () => {
      await fleet?.close();
      await held?.close();
      await registry?.close();
      const images = image ? [{ Id: image }] : [];
      const snapshots = await fleet.docker.listImages({
        filters: { reference: clusters.map((id) => `anvil-snapshots/${fleet.t.accountId}/${id}`) },
      });
      for (const found of [...images, ...snapshots])
        await fleet.docker
          .getImage(found.Id)
          .remove({ force: true })
          .catch(() => {});
    });

    const running = (id: string) =>
      waitFor(
        `${id} running`,
        async () => {
          const view = await get(id);
          if (view.status === 'error') throw new Error(`cluster in error: ${view.status_reason}`);
          return view.status === 'running';
        },
        120_000,
      );
    const execText = async (containerId: string, cmd: string[]) => {
      const exec = await fleet.docker
        .getContainer(containerId)
        .exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
      const stream = await exec.start({ hijack: true, stdin: false });
      const chunks: Buffer[] = [];
      await new Promise<void>((resolve, reject) => {
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => resolve());
        stream.on('error', reject);
      });
      // Docker's multiplexed frames: an 8-byte header before each payload.
      const all = Buffer.concat(chunks);
      let out = '';
      for (let i = 0; i + 8 <= all.length; ) {
        const size = all.readUInt32BE(i + 4);
        out += all.subarray(i + 8, i + 8 + size).toString();
        i += 8 + size;
      }
      return out;
    };
    const setRegistry = (key: TestMember | undefined, token: string) =>
      call(fleet.t, {
        method: 'PUT',
        url: '/v2/accounts/settings/integrations',
        ...(key ? { key } : {}),
        payload: {
          docker: {
            enabled: true,
            registries: [{ url: held.address, username: 'anvil-bot', access_token: token }],
          },
        },
      });
    const get = async (id: string, key?: TestMember) =>
      (await call(fleet.t, { url: `/v1/clusters/${id}`, ...(key ? { key } : {}) })).json().data;
    const create = async (name: string, dockerImage: string, key?: TestMember, script?: string[]) => {
      const r = await call(fleet.t, {
        method: 'POST',
        url: '/v1/clusters',
        ...(key ? { key } : {}),
        payload: {
          name,
          docker_image: dockerImage,
          gpu_type: 'H100',
          cpu_cores: 1,
          memory_gb: 1,
          storage_gb: 1,
          command: script ? script.join('; ') : 'trap "exit 0" TERM; while true; do sleep 1; done',
        },
      });
      if (r.statusCode === 201) {
        clusters.push(r.json().data.id);
        owners.set(r.json().data.id, key);
      }
      return r;
    };

    it("pulls a private image with the account's credentials, the cluster showing the bytes while it downloads", {
      timeout: 300_000,
    }, async () => {
      expect((await setRegistry(undefined, password)).statusCode).toBe(200);
      const r = await create('private', image);
      expect(r.statusCode, r.body).toBe(201);
      const id = r.json().data.id as string;
      await held.holding;
      const pulling = await waitFor(
        'the pull under way on the cluster',
        async () => {
          const view = await get(id);
          if (view.image_pull?.bytes_done > 0 && view.image_pull.bytes_total !== null) return view;
          const workload = await fleet.t.context.db.prisma.workload.findUnique({ where: { id } });
          throw new Error(
            `${view.status} ${JSON.stringify(view.image_pull)} ${JSON.stringify(workload?.actualStatus)}`,
          );
        },
        120_000,
      );
      expect(pulling.status).toBe('starting');
      expect(pulling.image_pull).toMatchObject({ status: 'pulling', image });
      expect(pulling.image_pull.bytes_done).toBeLessThan(pulling.image_pull.bytes_total);
      held.release();
      const running = await waitFor(
        'the cluster running',
        async () => {
          const view = await get(id);
          if (view.status === 'error') throw new Error(`cluster in error: ${view.status_reason}`);
          return view.status === 'running' ? view : null;
        },
        120_000,
      );
      expect(running.image_pull).toBeNull();
      expect((await fleet.docker.getImage(image).inspect()).RepoTags).toContain(image);
    });

    it("refuses another account the image already on the host when its credentials are wrong, with the registry's reason", {
      timeout: 300_000,
    }, async () => {
      // The image is on the host now; with the create-then-pull-if-missing of before, B would run it.
      expect((await fleet.docker.getImage(image).inspect()).Id).toMatch(/^sha256:/);
      expect((await setRegistry(other, 'not-the-password')).statusCode).toBe(200);
      const r = await create('borrowed', image, other);
      expect(r.statusCode, r.body).toBe(201);
      const id = r.json().data.id as string;
      const failed = await waitFor(
        'the cluster in error',
        async () => {
          const view = await get(id, other);
          return view.status === 'error' ? view : null;
        },
        120_000,
      );
      expect(failed.status_reason).toMatch(
        /^container could not be started: pull image .*(unauthorized|authentication required)/i,
      );
      const containers = await fleet.docker.listContainers({
        all: true,
        filters: { label: [`anvil.workload=${id}`] },
      });
      expect(containers).toEqual([]);
    });

    it('shows the registry password in no log line, API answer or stored spec', async () => {
      const text = logs.join('');
      // The logs were captured: the pulls are in them, with the registry but not the credentials.
      expect(text).toContain('pulling image');
      expect(text).toContain(held.address);
      expect(text).not.toContain(password);
      const answers = [
        await call(fleet.t, { url: '/v2/accounts/settings' }),
        await call(fleet.t, { url: '/v1/clusters' }),
        await call(fleet.t, { url: '/v1/clusters', key: other }),
        ...clusters.map((id) => {
          const key = owners.get(id);
          return call(fleet.t, { url: `/v1/clusters/${id}`, ...(key ? { key } : {}) });
        }),
      ];
      for (const answer of await Promise.all(answers)) {
        expect(answer.statusCode, answer.body).toBe(200);
        expect(answer.body).not.toContain(password);
      }
      const stored = await fleet.t.context.db.prisma.workload.findMany({
        select: { spec: true, actualStatus: true },
      });
      expect(JSON.stringify(stored)).not.toContain(password);
    });

    it('lets only its own account create a cluster from a snapshot', { timeout: 300_000 }, async () => {
      const source = clusters[0]!;
      const stop = await call(fleet.t, {
        method: 'POST',
        url: `/v1/clusters/${source}/stop`,
        payload: { save_state: true, snapshot_name: 'mine', wait_for_completion: true, timeout_minutes: 2 },
      });
      expect(stop.statusCode, stop.body).toBe(200);
      const snapshot = `anvil-snapshots/${fleet.t.accountId}/${source}:mine`;
      expect(stop.json().data.snapshot_creation).toMatchObject({ snapshot_name: snapshot });

      const refused = await create('stolen', snapshot, other);
      expect(refused.statusCode, refused.body).toBe(403);
      expect(refused.json().error).toMatchObject({ code: 'FORBIDDEN', details: { field: 'docker_image' } });
      expect(refused.json().error.message).toContain('snapshot of another account');

      // Started from the snapshot: placed on the host holding it.
      const own = await call(fleet.t, {
        method: 'POST',
        url: '/v1/clusters',
        payload: {
          name: 'restored',
          from_snapshot: snapshot,
          gpu_type: 'H100',
          cpu_cores: 1,
          memory_gb: 1,
          storage_gb: 1,
          command: 'trap "exit 0" TERM; while true; do sleep 1; done',
        },
      });
      if (own.statusCode === 201) clusters.push(own.json().data.id);
      expect(own.statusCode, own.body).toBe(201);
      const id = own.json().data.id as string;
      expect(own.json().data.docker_image).toBe(snapshot);
      await waitFor(
        'the cluster from the snapshot running',
        async () => {
          const view = await get(id);
          if (view.status === 'error') throw new Error(`cluster in error: ${view.status_reason}`);
          return view.status === 'running';
        },
        120_000,
      );
    });

    it('lists, starts from and deletes snapshots as objects of their cluster', {
      timeout: 300_000,
    }, async () => {
      const source = clusters[0]!;
      const snapshot = `anvil-snapshots/${fleet.t.accountId}/${source}:mine`;
      const listed = await call(fleet.t, { url: `/v1/clusters/${source}/snapshots` });
      expect(listed.statusCode, listed.body).toBe(200);
      const [entry, ...more] = listed.json().data.snapshots;
      expect(more).toEqual([]);
      const imageId = (await fleet.docker.getImage(snapshot).inspect()).Id;
      expect(entry).toMatchObject({ id: imageId, name: snapshot, names: [snapshot], host_id: fleet.hostId });
      expect(entry.size_bytes).toBeGreaterThan(0);
      // Another account sees no such cluster, and may not start from the snapshot by name either.
      expect((await call(fleet.t, { url: `/v1/clusters/${source}/snapshots`, key: other })).statusCode).toBe(
        404,
      );
      const theirs = await call(fleet.t, {
        method: 'POST',
        url: '/v1/clusters',
        key: other,
        payload: {
          name: 'stolen2',
          from_snapshot: snapshot,
          gpu_type: 'H100',
          cpu_cores: 1,
          memory_gb: 1,
          storage_gb: 1,
        },
      });
      expect(theirs.statusCode, theirs.body).toBe(403);
      expect(theirs.json().error.details).toMatchObject({ field: 'from_snapshot' });
      const unknown = await call(fleet.t, {
        method: 'POST',
        url: '/v1/clusters',
        payload: {
          name: 'x',
          from_snapshot: `${snapshot}-none`,
          gpu_type: 'H100',
          cpu_cores: 1,
          memory_gb: 1,
          storage_gb: 1,
        },
      });
      expect(unknown.statusCode, unknown.body).toBe(404);
      expect(unknown.json().error.code).toBe('SNAPSHOT_NOT_FOUND');

      // The cluster started from it (previous test) still runs from the image: the delete is refused.
      const restored = clusters.at(-1)!;
      const busy = await call(fleet.t, {
        method: 'DELETE',
        url: `/v1/clusters/${source}/snapshots/${encodeURIComponent(imageId)}`,
      });
      expect(busy.statusCode, busy.body).toBe(409);
      const gone = await call(fleet.t, {
        method: 'DELETE',
        url: `/v1/clusters/${restored}`,
        payload: { confirm_deletion: 'DELETE', wait_for_completion: true, force: true },
      });
      expect(gone.statusCode, gone.body).toBe(200);
      const deleted = await call(fleet.t, {
        method: 'DELETE',
        url: `/v1/clusters/${source}/snapshots/${encodeURIComponent(imageId)}`,
      });
      expect(deleted.statusCode, deleted.body).toBe(200);
      expect(deleted.json().data).toMatchObject({ id: imageId, name: snapshot });
      await expect(fleet.docker.getImage(snapshot).inspect()).rejects.toThrow();
      expect(
        (await call(fleet.t, { url: `/v1/clusters/${source}/snapshots` })).json().data.snapshots,
      ).toEqual([]);
      const again = await call(fleet.t, {
        method: 'DELETE',
        url: `/v1/clusters/${source}/snapshots/${encodeURIComponent(imageId)}`,
      });
      expect(again.statusCode).toBe(404);
      expect(again.json().error.code).toBe('SNAPSHOT_NOT_FOUND');
    });

    it('keeps /workspace in a final snapshot, and a cluster started from it finds its files', {
      timeout: 300_000,
    }, async () => {
      const r = await create('with-files', BUSYBOX_IMAGE, undefined, [
        `mkdir -p /workspace/d && echo kept-${run} > /workspace/d/note.txt`,
        'trap "exit 0" TERM; while true; do sleep 1; done',
      ]);
      expect(r.statusCode, r.body).toBe(201);
      const source = r.json().data.id as string;
      await running(source);
      const deleted = await call(fleet.t, {
        method: 'DELETE',
        url: `/v1/clusters/${source}`,
        payload: {
          confirm_deletion: 'DELETE',
          wait_for_completion: true,
          force: true,
          create_final_snapshot: true,
          snapshot_name: 'final',
        },
      });
      expect(deleted.statusCode, deleted.body).toBe(200);
      const snapshot = `anvil-snapshots/${fleet.t.accountId}/${source}:final`;
      expect(deleted.json().data.final_snapshot).toMatchObject({ snapshot_name: snapshot });
      expect((await fleet.docker.getImage(snapshot).inspect()).Config.Labels).toMatchObject({
        'anvil.workspace': '/workspace',
        'anvil.account': fleet.t.accountId,
      });

      const from = await call(fleet.t, {
        method: 'POST',
        url: '/v1/clusters',
        payload: {
          name: 'from-final',
          from_snapshot: snapshot,
          gpu_type: 'H100',
          cpu_cores: 1,
          memory_gb: 1,
          storage_gb: 1,
          command: 'trap "exit 0" TERM; while true; do sleep 1; done',
        },
      });
      expect(from.statusCode, from.body).toBe(201);
      const id = from.json().data.id as string;
      clusters.push(id);
      await running(id);
      const [container] = await fleet.docker.listContainers({ filters: { label: [`anvil.workload=${id}`] } });
      expect(await execText(container!.Id, ['cat', '/workspace/d/note.txt'])).toBe(`kept-${run}\n`);
    });
  },
);
