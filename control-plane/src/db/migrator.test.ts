import { newId } from '@anvil/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../testing/index.ts';
import { Prisma } from './generated/client.ts';
import { migrate, readMigrations } from './migrator.ts';

describe('migrator', () => {
  let database: TestDatabase;
  afterEach(async () => database.drop());

  it('migrates an empty database, records the migrations as Prisma does, and is idempotent', async () => {
    database = await createTestDatabase({ migrated: false });
    const applied = await database.db.session((sql) => migrate(sql));
    expect(applied).toEqual(readMigrations().map((m) => m.name));
    const rows = await database.db.sql.query<{ migration_name: string; checksum: string }>(
      'SELECT migration_name, checksum FROM "_prisma_migrations" ORDER BY migration_name',
    );
    expect(rows.map((r) => r.checksum)).toEqual(readMigrations().map((m) => m.checksum));
    expect(await database.db.session((sql) => migrate(sql))).toEqual([]);
  });

  it('refuses to start when an applied migration was edited', async () => {
    database = await createTestDatabase({ migrated: false });
    await database.db.session((sql) => migrate(sql));
    const edited = readMigrations().map((m, i) => (i === 0 ? { ...m, checksum: 'f'.repeat(64) } : m));
    await expect(database.db.session((sql) => migrate(sql, edited))).rejects.toThrow(
      /edited after it was applied/,
    );
  });

  it('rolls back a failing migration and records nothing', async () => {
    database = await createTestDatabase({ migrated: false });
    const broken = [
      ...readMigrations(),
      { name: '29990101000000_broken', sql: 'CREATE TABLE x (a int); SELECT nope;', checksum: 'x' },
    ];
    await expect(database.db.session((sql) => migrate(sql, broken))).rejects.toThrow(
      /29990101000000_broken failed/,
    );
    const tables = await database.db.sql.query(
      "SELECT 1 FROM information_schema.tables WHERE table_name = 'x'",
    );
    expect(tables).toHaveLength(0);
    expect(await database.db.session((sql) => migrate(sql))).toEqual([]);
  });

  it('round-trips every model of the schema through a freshly migrated database', async () => {
    database = await createTestDatabase();
    const prisma = database.db.prisma;
    const accountId = newId('acc');
    const userId = newId('usr');
    const at = new Date('2026-01-02T03:04:05.678Z');
    // One fixture per model: adding a model without a fixture fails the completeness check below.
    const fixtures: Record<string, () => Promise<[unknown, unknown]>> = {
      AgentVersionSetting: async () => {
        const data = { id: 'fleet', desiredVersion: '0.2.0', updatedAt: at, updatedById: userId };
        await prisma.agentVersionSetting.create({ data });
        return [data, await prisma.agentVersionSetting.findUniqueOrThrow({ where: { id: 'fleet' } })];
      },
      Account: async () => {
        const data = { id: accountId, name: 'Acme', tier: 'pro', createdAt: at };
        await prisma.account.create({ data });
        return [data, await prisma.account.findUniqueOrThrow({ where: { id: accountId } })];
      },
      User: async () => {
        const data = {
          id: userId,
          accountId,
          email: 'a@b.c',
          name: 'A',
          username: 'a',
          role: 'admin',
          status: 'active',
          bio: 'b',
          location: 'l',
          website: 'https://a.example',
          twitter: 'tw',
          github: 'gh',
          avatarFile: 'usr_a-0123456789abcdef.png',
          verified: true,
          preferences: { timezone: 'Europe/Berlin', theme: 'dark' },
          department: 'ml',
          title: 'engineer',
          customPermissions: ['execute'],
          invitedById: 'usr_inviter',
          joinedAt: at,
          lastActiveAt: at,
          suspendedAt: at,
          removedAt: at,
        };
        await prisma.user.create({ data });
        return [data, await prisma.user.findUniqueOrThrow({ where: { id: userId } })];
      },
      ApiKey: async () => {
        const data = {
          id: newId('key'),
          accountId,
          userId,
          name: 'k',
          description: 'd',
          type: 'read_write',
          environment: 'test',
          permissions: ['read', 'write'],
          scopes: ['accounts', 'clusters'],
          displayPrefix: 'anv_test_abcd',
          hash: 'h'.repeat(64),
          status: 'rotated',
          expiresAt: at,
          lastUsedAt: at,
          revokedAt: null,
          rotatedAt: at,
          graceUntil: at,
          replacedById: 'key_x',
          createdById: 'key_y',
        };
        await prisma.apiKey.create({ data });
        return [data, await prisma.apiKey.findUniqueOrThrow({ where: { id: data.id } })];
      },
      RateLimitCounter: async () => {
        const data = { bucket: 'acc:read', windowStart: at, count: 7, expiresAt: at };
        await prisma.rateLimitCounter.create({ data });
        return [
          data,
          await prisma.rateLimitCounter.findUniqueOrThrow({
            where: { bucket_windowStart: { bucket: 'acc:read', windowStart: at } },
          }),
        ];
      },
      RateLimitBoost: async () => {
        const data = {
          id: newId('boost'),
          accountId,
          multiplier: 2.5,
          reason: 'launch',
          startsAt: at,
          expiresAt: at,
          createdByKeyId: 'key_z',
        };
        await prisma.rateLimitBoost.create({ data });
        return [data, await prisma.rateLimitBoost.findUniqueOrThrow({ where: { id: data.id } })];
      },
      ApiRequest: async () => {
        const data = {
          accountId,
          keyId: 'key_q',
          method: 'GET',
          route: '/v2/auth/verify',
          statusCode: 200,
          durationMs: 1.25,
          createdAt: at,
        };
        const created = await prisma.apiRequest.create({ data });
        return [data, await prisma.apiRequest.findUniqueOrThrow({ where: { id: created.id } })];
      },
      // Host fleet (issue 3).
      HostJoinToken: async () => {
        const data = {
          id: 'jt_fixture',
          description: 'rack 4',
          hash: 'j'.repeat(64),
          displayPrefix: 'anvjt_abcd',
          region: 'eu-west',
          maxUses: 5,
          useCount: 2,
          expiresAt: at,
          revokedAt: at,
          lastUsedAt: at,
          createdByUserId: userId,
          createdByKeyId: 'key_y',
          createdAt: at,
        };
        await prisma.hostJoinToken.create({ data });
        return [data, await prisma.hostJoinToken.findUniqueOrThrow({ where: { id: data.id } })];
      },
      Host: async () => {
        const data = {
          id: 'host_fixture',
          name: 'gpu-01',
          hostname: 'gpu-01.internal',
          state: 'unreachable',
          cordoned: true,
          cordonedAt: at,
          cordonReason: 'maintenance',
          region: 'eu-west',
          credentialHash: 'c'.repeat(64),
          agentVersion: '0.1.0',
          agentVersionPin: '0.2.0',
          protocolVersion: 1,
          inventory: { gpus: { simulated: true, devices: [{ index: 0, name: 'H100' }] } },
          simulated: true,
          gpuCount: 1,
          lastHeartbeatAt: at,
          unreachableSince: at,
          connectedReplicaId: 'cp_x',
          connectionId: 'conn-1',
          connectedAt: at,
          disconnectedAt: at,
          desiredGeneration: 7,
          ackedGeneration: 6,
          joinTokenId: 'jt_fixture',
          deletedAt: at,
          createdAt: at,
        };
        await prisma.host.create({ data });
        const operator = await prisma.account.update({ where: { id: accountId }, data: { operator: true } });
        expect(operator.operator).toBe(true);
        return [data, await prisma.host.findUniqueOrThrow({ where: { id: data.id } })];
      },
      HostEvent: async () => {
        const data = {
          id: 1n,
          hostId: 'host_fixture',
          at,
          type: 'gpu_health',
          message: 'GPU 0 failed: xid_79',
          detail: { index: 0, state: 'failed' },
        };
        await prisma.hostEvent.create({ data });
        return [data, await prisma.hostEvent.findUniqueOrThrow({ where: { id: 1n } })];
      },
      Workload: async () => {
        const data = {
          id: 'wl_fixture',
          hostId: 'host_fixture',
          kind: 'cluster',
          ownerAccountId: accountId,
          spec: { workloadId: 'wl_fixture', image: 'busybox', env: { A: 'b' } },
          desired: 'stopped',
          phase: 'exited',
          actualStatus: { phase: 'exited', exitCode: 3 },
          actualAt: at,
          pullProgress: { image: 'busybox', done: true },
          hostUnreachable: true,
          generation: 7,
          createdAt: at,
        };
        await prisma.workload.create({ data });
        return [data, await prisma.workload.findUniqueOrThrow({ where: { id: data.id } })];
      },
      MetricSample: async () => {
        const data = {
          hostId: 'host_fixture',
          kind: 'gpu',
          series: 'GPU-1',
          at,
          data: { utilizationPercent: 97.5, 'net:eth0:rxBytes': 1e12 },
          info: { processes: [{ pid: 1, usedMemoryBytes: 5 }] },
          receivedAt: at,
        };
        const created = await prisma.metricSample.create({ data });
        return [data, await prisma.metricSample.findUniqueOrThrow({ where: { id: created.id } })];
      },
      MetricRollup: async () => {
        const data = {
          hostId: 'host_fixture',
          kind: 'host',
          series: '',
          bucket: at,
          samples: 4,
          data: { cpuPercent: { avg: 1.5, min: 1, max: 2, last: 2 } },
          computedAt: at,
        };
        await prisma.metricRollup.create({ data });
        const key = { hostId: 'host_fixture', kind: 'host', series: '', bucket: at };
        return [
          data,
          await prisma.metricRollup.findUniqueOrThrow({ where: { hostId_kind_series_bucket: key } }),
        ];
      },
      LogEntry: async () => {
        const data = {
          hostId: 'host_fixture',
          workloadId: 'wl_fixture',
          containerId: 'c0ffee',
          stream: 'stderr',
          ts: '2026-01-02T03:04:05.678901234Z',
          at,
          line: 'héllo \t wörld',
          receivedAt: at,
        };
        const created = await prisma.logEntry.create({ data });
        return [data, await prisma.logEntry.findUniqueOrThrow({ where: { seq: created.seq } })];
      },
      LogLoss: async () => {
        const data = {
          hostId: 'host_fixture',
          workloadId: 'wl_fixture',
          containerId: 'c0ffee',
          lines: 12,
          bytes: 5_000_000_000n,
          firstTs: '2026-01-02T03:04:05.000000000Z',
          lastTs: '2026-01-02T03:04:06.000000000Z',
          receivedAt: at,
        };
        const created = await prisma.logLoss.create({ data });
        return [data, await prisma.logLoss.findUniqueOrThrow({ where: { id: created.id } })];
      },
      // Clusters, usage records, GPU prices (issue 4).
      Cluster: async () => {
        const data = {
          id: 'cluster_fixture',
          accountId,
          ownerId: userId,
          name: 'train-1',
          description: 'd',
          status: 'running',
          statusReason: null,
          gpuType: 'H100',
          gpuCount: 2,
          cpuCores: 16,
          memoryGb: 128,
          storageGb: 500,
          region: 'us-east-1',
          projectId: 'proj_1',
          templateId: 'tmpl_1',
          dockerImage: 'anvil/busybox:test',
          command: ['sh', '-c', 'sleep 1'],
          env: { A: 'b' },
          ports: [{ internal_port: 8888, protocol: 'tcp', description: 'jupyter' }],
          sshEnabled: true,
          expiresAt: at,
          hostId: 'host_fixture',
          gpuIndices: [0, 3],
          queuedAt: at,
          hourlyRate: 6.5,
          sessionStartedAt: at,
          operation: { kind: 'stop', phase: 'completed', percentage: 100 },
          createdAt: at,
          deletedAt: null,
        };
        await prisma.cluster.create({ data });
        return [data, await prisma.cluster.findUniqueOrThrow({ where: { id: data.id } })];
      },
      UsageRecord: async () => {
        const data = {
          id: 'use_fixture',
          accountId,
          userId,
          resourceType: 'cluster',
          resourceId: 'cluster_fixture',
          kind: 'gpu_compute',
          gpuType: 'H100',
          gpuCount: 2,
          quantity: 1.25,
          unit: 'hour',
          gpuHours: 2.5,
          cost: 8.125,
          currency: 'USD',
          startedAt: at,
          endedAt: at,
          metadata: { session: 1 },
          createdAt: at,
        };
        await prisma.usageRecord.create({ data });
        return [data, await prisma.usageRecord.findUniqueOrThrow({ where: { id: data.id } })];
      },
      GpuPrice: async () => {
        const data = { gpuType: 'H100', hourlyRate: 3.25, currency: 'USD' };
        await prisma.gpuPrice.create({ data });
        return [data, await prisma.gpuPrice.findUniqueOrThrow({ where: { gpuType: 'H100' } })];
      },
      HostCapacity: async () => {
        const data = {
          hostId: 'host_capacity_fixture',
          gpuType: 'H100',
          gpuIndices: [0, 1],
          gpuUuids: ['GPU-a', 'GPU-b'],
          cpuThreads: 16,
          memoryGb: 125.5,
          diskGb: 900,
          freeIndices: [0, 1],
          freeCount: 2,
          digest: 'd',
          updatedAt: at,
        };
        await prisma.hostCapacity.create({ data });
        return [
          data,
          await prisma.hostCapacity.findUniqueOrThrow({
            where: { hostId_gpuType: { hostId: data.hostId, gpuType: 'H100' } },
          }),
        ];
      },
      HostGpuHealth: async () => {
        const data = {
          hostId: 'host_fixture',
          gpuIndex: 1,
          gpuUuid: 'GPU-fixture-1',
          state: 'failed',
          reasons: [
            {
              code: 'xid_79',
              severity: 'failed',
              message: 'fell off the bus',
              source: 'nvmlEventSetWait_v2',
              since: 1,
            },
          ],
          since: at,
          resetAt: at,
          resetBy: 'usr_fixture',
          updatedAt: at,
        };
        await prisma.hostGpuHealth.create({ data });
        return [
          data,
          await prisma.hostGpuHealth.findUniqueOrThrow({
            where: { hostId_gpuIndex: { hostId: data.hostId, gpuIndex: 1 } },
          }),
        ];
      },
      HostAllocation: async () => {
        const data = {
          hostId: 'host_capacity_fixture',
          usedCpuCores: 4,
          usedMemoryGb: 16,
          usedStorageGb: 100,
          reservedBy: 'cluster_fixture',
          reservedGpuType: 'H100',
          reservedGpuCount: 2,
          reservedCpuCores: 8,
          reservedMemoryGb: 64,
          reservedStorageGb: 200,
          reservedAt: at,
          updatedAt: at,
        };
        await prisma.hostAllocation.create({ data });
        return [data, await prisma.hostAllocation.findUniqueOrThrow({ where: { hostId: data.hostId } })];
      },
      ClusterTemplate: async () => {
        const data = {
          id: 'tmpl_fixture',
          accountId,
          projectId: 'proj_1',
          name: 'PyTorch',
          description: 'd',
          category: 'ml',
          framework: 'pytorch',
          version: '1.2.0',
          versionNotes: 'notes',
          dockerImage: 'anvil/pytorch:test',
          gpuCompatible: true,
          official: false,
          defaultConfiguration: { gpu_type: 'A100', gpu_count: 1 },
          environmentVariables: { A: 'b' },
          startupScript: 'echo hi',
          portMappings: [{ internal_port: 8888, protocol: 'tcp', description: 'j', required: true }],
          requiredPackages: ['torch'],
          softwareVersions: { python: '3.11' },
          resourceLimits: { min_resources: { gpu_count: 1 } },
          compatibility: { gpu_types: ['A100'] },
          tags: ['x'],
          createdById: userId,
          isPublic: true,
          isDeprecated: false,
          createdAt: at,
          deletedAt: null,
        };
        await prisma.clusterTemplate.create({ data });
        return [data, await prisma.clusterTemplate.findUniqueOrThrow({ where: { id: data.id } })];
      },
      ClusterTemplateVersion: async () => {
        const data = {
          id: 'tmpl_fixture@1.2.0',
          templateId: 'tmpl_fixture',
          version: '1.2.0',
          versionNotes: 'notes',
          snapshot: { docker_image: 'anvil/pytorch:test', environment_variables: { A: 'b' } },
          createdById: userId,
          createdAt: at,
        };
        await prisma.clusterTemplateVersion.create({ data });
        return [data, await prisma.clusterTemplateVersion.findUniqueOrThrow({ where: { id: data.id } })];
      },
      UsageAlert: async () => {
        const data = {
          id: 'alert_fixture_rule',
          accountId,
          name: 'Daily spend',
          type: 'cost',
          threshold: 12.5,
          period: 'daily',
          enabled: true,
          createdById: userId,
          createdAt: at,
        };
        await prisma.usageAlert.create({ data });
        return [data, await prisma.usageAlert.findUniqueOrThrow({ where: { id: data.id } })];
      },
      UsageAlertTrigger: async () => {
        const data = {
          id: 'alert_fixture_trigger',
          accountId,
          alertId: 'alert_fixture_rule',
          ruleKey: 'alert_fixture_rule',
          type: 'cost',
          period: 'daily',
          periodStart: at,
          threshold: 12.5,
          value: 13.25,
          triggeredAt: at,
          notifications: [{ channel: 'webhook', status: 'sent' }],
        };
        await prisma.usageAlertTrigger.create({ data });
        return [data, await prisma.usageAlertTrigger.findUniqueOrThrow({ where: { id: data.id } })];
      },
      SshKey: async () => {
        const data = {
          id: 'sshkey_fixture',
          accountId,
          userId,
          name: 'laptop',
          keyType: 'ssh-ed25519',
          publicKey: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFixture',
          fingerprint: 'SHA256:fixture',
          bits: 256,
          comment: 'me@laptop',
          lastUsedAt: at,
          createdAt: at,
        };
        await prisma.sshKey.create({ data });
        return [data, await prisma.sshKey.findUniqueOrThrow({ where: { id: data.id } })];
      },
      ClusterCustomMetric: async () => {
        const data = {
          id: 7n,
          clusterId: 'cluster_fixture',
          accountId,
          name: 'training_loss',
          description: 'loss per step',
          type: 'gauge',
          unit: 'ratio',
          tags: ['train'],
          value: 0.25,
          at,
          receivedAt: at,
        };
        await prisma.clusterCustomMetric.create({ data });
        return [data, await prisma.clusterCustomMetric.findUniqueOrThrow({ where: { id: data.id } })];
      },
      ClusterSecret: async () => {
        const data = {
          id: 'secret_fixture',
          accountId,
          clusterId: 'cluster_fixture',
          name: 'hf-token',
          description: 'd',
          type: 'api_key',
          category: 'ml_services',
          sealedValue: 'v1.0123abcd.nonce.body.tag',
          environmentVariable: 'HF_TOKEN',
          filePath: '/run/secrets/hf',
          expirationDate: at,
          permissions: { read_only: true, allowed_users: [], allowed_roles: ['admin'], file_mode: 256 },
          rotationPolicy: { enabled: true, rotation_interval_days: 30, notification_days_before: 7 },
          lastRotation: at,
          nextRotation: at,
          tags: ['ml'],
          accessCount: 3,
          lastAccessed: at,
          createdById: userId,
          createdAt: at,
        };
        await prisma.clusterSecret.create({ data });
        return [data, await prisma.clusterSecret.findUniqueOrThrow({ where: { id: data.id } })];
      },
      // Accounts: roles and permissions, team, settings (issue 6).
      CustomRole: async () => {
        const data = {
          accountId,
          id: 'role_custom_ml',
          name: 'ml',
          displayName: 'ML',
          description: 'd',
          permissions: ['read', 'execute'],
          scopes: ['clusters'],
          limitations: { maxClusters: 2, maxApiKeys: 3 },
          inherits: ['viewer'],
          assignable: false,
          createdById: userId,
          createdAt: at,
          updatedAt: at,
        };
        await prisma.customRole.create({ data });
        return [
          data,
          await prisma.customRole.findUniqueOrThrow({
            where: { accountId_id: { accountId, id: 'role_custom_ml' } },
          }),
        ];
      },
      PermissionGrant: async () => {
        const data = {
          id: newId('grant'),
          accountId,
          userId,
          permissions: ['write'],
          scopes: ['clusters'],
          resources: ['cluster_a'],
          reason: 'r',
          expiresAt: at,
          status: 'revoked',
          grantedById: 'usr_g',
          grantedAt: at,
          revokedById: 'usr_r',
          revokedAt: at,
        };
        await prisma.permissionGrant.create({ data });
        return [data, await prisma.permissionGrant.findUniqueOrThrow({ where: { id: data.id } })];
      },
      ResourceShare: async () => {
        const data = {
          id: newId('share'),
          accountId,
          resourceId: 'cluster_a',
          userId,
          permissions: ['read', 'execute'],
          message: 'm',
          expiresAt: at,
          status: 'revoked',
          sharedById: 'usr_s',
          sharedAt: at,
          revokedById: 'usr_r',
          revokedAt: at,
        };
        await prisma.resourceShare.create({ data });
        return [data, await prisma.resourceShare.findUniqueOrThrow({ where: { id: data.id } })];
      },
      Resource: async () => {
        const data = {
          id: 'cluster_a',
          accountId,
          type: 'cluster',
          name: 'train-1',
          ownerId: userId,
          createdAt: at,
          deletedAt: at,
        };
        await prisma.resource.create({ data });
        return [data, await prisma.resource.findUniqueOrThrow({ where: { id: data.id } })];
      },
      Invitation: async () => {
        const data = {
          id: newId('inv'),
          accountId,
          email: 'new@b.c',
          role: 'developer',
          permissions: ['execute'],
          department: 'ml',
          title: 't',
          message: 'welcome',
          tokenHash: 't'.repeat(64),
          status: 'accepted',
          expiresAt: at,
          invitedById: userId,
          createdAt: at,
          resentAt: at,
          cancelledAt: at,
          acceptedAt: at,
          acceptedUserId: 'usr_new',
        };
        await prisma.invitation.create({ data });
        return [data, await prisma.invitation.findUniqueOrThrow({ where: { id: data.id } })];
      },
      AuditEvent: async () => {
        const data = {
          id: newId('audit'),
          accountId,
          type: 'access_denied',
          action: 'execute_attempt',
          actorId: userId,
          actorName: 'A',
          actorIp: '203.0.113.9',
          targetUserId: 'usr_t',
          targetName: 'T',
          resourceType: 'cluster',
          resourceId: 'cluster_a',
          resourceName: 'train-1',
          details: { requiredPermission: 'execute', userRole: 'viewer' },
          createdAt: at,
        };
        await prisma.auditEvent.create({ data });
        return [data, await prisma.auditEvent.findUniqueOrThrow({ where: { id: data.id } })];
      },
      ActivityEvent: async () => {
        const data = {
          accountId,
          userId,
          kind: 'resource_created',
          resourceType: 'cluster',
          resourceId: 'cluster_a',
          createdAt: at,
        };
        const created = await prisma.activityEvent.create({ data });
        return [data, await prisma.activityEvent.findUniqueOrThrow({ where: { id: created.id } })];
      },
      AccountSettings: async () => {
        const data = {
          accountId,
          data: { billing: { currency: 'EUR' }, notifications: { webhook: { secret: 'v1.x' } } },
          updatedAt: at,
          updatedById: userId,
        };
        await prisma.accountSettings.create({ data });
        return [data, await prisma.accountSettings.findUniqueOrThrow({ where: { accountId } })];
      },
      // HTTPS port proxy (issue 5); rows reference the Cluster fixture above.
      ProxySettings: async () => {
        const data = {
          clusterId: 'cluster_fixture',
          enabled: false,
          defaultAuthentication: true,
          sessionTimeoutMinutes: 30,
          maxConcurrentSessions: 5,
          ipWhitelist: ['10.0.0.0/8', '2001:db8::/32'],
          blockedIps: ['10.1.2.3'],
          globalRateLimit: { requests_per_minute: 600, burst_size: 50 },
          perUserRateLimit: null,
          securityHeaders: { hsts_enabled: true, content_security_policy: null, x_frame_options: 'DENY' },
          createdAt: at,
        };
        await prisma.proxySettings.create({ data: { ...data, perUserRateLimit: Prisma.DbNull } });
        return [data, await prisma.proxySettings.findUniqueOrThrow({ where: { clusterId: data.clusterId } })];
      },
      ProxyPortMapping: async () => {
        const data = {
          id: 'port_fixture',
          clusterId: 'cluster_fixture',
          internalPort: 8888,
          externalPort: 30000,
          protocol: 'tcp',
          description: 'jupyter',
          healthCheck: { enabled: true, path: '/', interval_seconds: 30 },
          accessControl: { public_access: false },
          customDomain: null,
          healthStatus: 'healthy',
          consecutiveFailures: 0,
          lastCheck: at,
          totalRequests: 12n,
          totalResponseMs: 34.5,
          lastAccessed: at,
          createdAt: at,
        };
        await prisma.proxyPortMapping.create({ data });
        return [data, await prisma.proxyPortMapping.findUniqueOrThrow({ where: { id: data.id } })];
      },
      ProxyVisitor: async () => {
        const data = { portId: 'port_fixture', visitor: 'a'.repeat(64), firstSeen: at };
        await prisma.proxyVisitor.create({ data });
        return [
          data,
          await prisma.proxyVisitor.findUniqueOrThrow({
            where: { portId_visitor: { portId: data.portId, visitor: data.visitor } },
          }),
        ];
      },
      ProxySession: async () => {
        const data = {
          tokenHash: 'b'.repeat(64),
          kind: 'session',
          clusterId: 'cluster_fixture',
          internalPort: 8888,
          userId,
          keyId: 'key_fixture',
          expiresAt: at,
          createdAt: at,
        };
        await prisma.proxySession.create({ data });
        return [data, await prisma.proxySession.findUniqueOrThrow({ where: { tokenHash: data.tokenHash } })];
      },
      ProxyAccessLog: async () => {
        const data = {
          clusterId: 'cluster_fixture',
          at,
          clientIp: '2001:db8::7',
          userId: null,
          method: 'GET',
          path: '/lab?x=1',
          statusCode: 429,
          responseTimeMs: 1.25,
          userAgent: 'curl/8',
        };
        const created = await prisma.proxyAccessLog.create({ data });
        return [data, await prisma.proxyAccessLog.findUniqueOrThrow({ where: { id: created.id } })];
      },
      WebhookEvent: async () => {
        const data = {
          accountId: 'acc_fixture',
          type: 'member.joined',
          data: { user_id: 'usr_fixture', role: 'developer' },
          occurredAt: at,
          delivery: 'sent',
          attempts: 2,
          nextAttemptAt: at,
          leaseUntil: null,
          deliveryId: 'evt_0123456789abcdef01234567',
          detail: null,
          deliveredAt: at,
        };
        const created = await prisma.webhookEvent.create({ data });
        return [data, await prisma.webhookEvent.findUniqueOrThrow({ where: { id: created.id } })];
      },
      // Training datasets: their rows reference the account (cascade) and each other.
      Dataset: async () => {
        const data = {
          id: 'ds_fixture',
          accountId,
          createdById: userId,
          name: 'chat',
          description: 'd',
          type: 'text',
          format: 'jsonl',
          status: 'ready',
          tags: ['a', 'b'],
          validationConfig: { required_fields: ['prompt'], min_examples: 1 },
          validationResult: { status: 'passed', checks: [{ name: 'parse', status: 'pass' }], warnings: [] },
          preprocessing: { tokenizer: 'gpt2' },
          metadata: { source: 'crawl' },
          sourceUrl: 'https://example.com/d.jsonl',
          splitRatio: { train: 0.8, validation: 0.1, test: 0.1 },
          uploadTokenHash: 'f'.repeat(64),
          uploadTokenExpiresAt: at,
          currentVersionId: 'dsv_fixture',
          sizeBytes: 5_000_000_000n,
          compressedBytes: 123n,
          examples: 42n,
          checksum: 'a'.repeat(64),
          schema: { fields: [{ name: 'prompt', type: 'string', nullable: false }] },
          statistics: { records: 42 },
          error: { code: 'VALIDATION_FAILED', message: 'm', details: {} },
          processedAt: at,
          createdAt: at,
          updatedAt: at,
        };
        await prisma.dataset.create({ data });
        return [data, await prisma.dataset.findUniqueOrThrow({ where: { id: data.id } })];
      },
      DatasetVersion: async () => {
        const data = {
          id: 'dsv_fixture',
          datasetId: 'ds_fixture',
          sizeBytes: 5_000_000_000n,
          checksum: 'a'.repeat(64),
          source: 'multipart',
          createdAt: at,
        };
        await prisma.datasetVersion.create({ data });
        return [data, await prisma.datasetVersion.findUniqueOrThrow({ where: { id: data.id } })];
      },
      DatasetUpload: async () => {
        const data = {
          id: 'dsup_fixture',
          datasetId: 'ds_fixture',
          filename: 'big.jsonl',
          declaredSize: 6_000_000_000n,
          status: 'completed',
          createdAt: at,
          expiresAt: at,
          completedAt: at,
        };
        await prisma.datasetUpload.create({ data });
        return [data, await prisma.datasetUpload.findUniqueOrThrow({ where: { id: data.id } })];
      },
      DatasetUploadPart: async () => {
        const data = {
          uploadId: 'dsup_fixture',
          partNumber: 10_000,
          sizeBytes: 5_368_709_120n,
          checksum: 'b'.repeat(64),
          uploadedAt: at,
        };
        await prisma.datasetUploadPart.create({ data });
        return [
          data,
          await prisma.datasetUploadPart.findUniqueOrThrow({
            where: { uploadId_partNumber: { uploadId: 'dsup_fixture', partNumber: 10_000 } },
          }),
        ];
      },
      Endpoint: async () => {
        const data = {
          id: 'ep_fixture',
          accountId,
          ownerId: userId,
          name: 'llm',
          status: 'updating',
          statusReason: 'replacing workers',
          templateId: 'tmpl_x',
          dockerImage: 'img:1',
          command: ['sh', '-c', 'serve'],
          workerPort: 9000,
          gpuType: 'H100',
          gpuCount: 2,
          workerCount: 3,
          maxConcurrency: 4,
          timeoutSeconds: 120,
          env: { A: 'b' },
          autoScaling: { enabled: true, minWorkers: 0, maxWorkers: 5 },
          configVersion: 2,
          targetWorkers: 3,
          scaleState: { lastScaleUpAt: 1 },
          createdAt: at,
          updatedAt: at,
          deletedAt: at,
        };
        await prisma.endpoint.create({ data });
        return [data, await prisma.endpoint.findUniqueOrThrow({ where: { id: data.id } })];
      },
      EndpointWorker: async () => {
        const data = {
          id: 'wl_fixture_worker',
          endpointId: 'ep_fixture',
          accountId,
          hostId: 'host_x',
          gpuIndices: [0, 3],
          configVersion: 2,
          status: 'ready',
          statusReason: 'r',
          probeFailures: 1,
          lastProbeAt: at,
          lastProbeMs: 12,
          lastProbeError: 'e',
          createdAt: at,
          readyAt: at,
          stoppedAt: at,
          updatedAt: at,
        };
        await prisma.endpointWorker.create({ data });
        return [data, await prisma.endpointWorker.findUniqueOrThrow({ where: { id: data.id } })];
      },
      EndpointJob: async () => {
        const data = {
          id: 'job-fixture',
          endpointId: 'ep_fixture',
          accountId,
          userId,
          keyId: 'key_x',
          status: 'COMPLETED',
          input: { prompt: 'hi' },
          output: { text: 'hello' },
          error: null,
          executionTimeoutMs: 60_000,
          ttlMs: 86_400_000n,
          expiresAt: at,
          workerId: 'wl_fixture_worker',
          attempts: 1,
          retries: 2,
          leaseUntil: at,
          dispatchedBy: 'epd_x',
          streamCount: 3,
          streamRead: 1,
          webhook: 'https://example.com/h',
          webhookStatus: 'sent',
          webhookAttempts: 1,
          webhookNextAt: at,
          webhookError: null,
          queuedAt: at,
          startedAt: at,
          completedAt: at,
          createdAt: at,
          updatedAt: at,
        };
        await prisma.endpointJob.create({ data });
        return [data, await prisma.endpointJob.findUniqueOrThrow({ where: { id: data.id } })];
      },
      EndpointJobChunk: async () => {
        const data = { jobId: 'job-fixture', seq: 1, output: 'part', createdAt: at };
        await prisma.endpointJobChunk.create({ data });
        return [
          data,
          await prisma.endpointJobChunk.findUniqueOrThrow({
            where: { jobId_seq: { jobId: 'job-fixture', seq: 1 } },
          }),
        ];
      },
      TrainingJob: async () => {
        const data = {
          id: 'job_fixture',
          accountId,
          createdById: userId,
          name: 'fine-tune',
          description: 'd',
          modelType: 'llm',
          datasetId: 'ds_fixture',
          tags: ['a'],
          status: 'stopped',
          statusReason: 'stopped on request',
          config: { training: { learning_rate: 0.001 } },
          parameters: { learning_rate: 0.001 },
          metrics: { currentLoss: 0.5, bestLoss: 0.4 },
          progress: { currentStep: 10 },
          gpuType: 'H100',
          gpusPerWorker: 2,
          workers: 3,
          priority: 'high',
          image: 'trainer:1',
          command: ['python', 'train.py'],
          form: 'short',
          tuneId: 'tune_fixture',
          trialNumber: 4,
          attempt: 2,
          placement: [
            { rank: 0, workloadId: 'job_fixture-r0', hostId: 'host_x', gpus: [], staleContainerId: null },
          ],
          resumeFrom: 'ckpt_fixture',
          stopRequest: { saveCheckpoint: true, reason: null, at: at.toISOString() },
          exitCode: 137,
          hourlyRate: 21.6,
          sessionStartedAt: at,
          queuedAt: at,
          preemptions: 2,
          preemptedAt: at,
          logCursor: 9_000_000_000n,
          startedAt: at,
          completedAt: at,
          createdAt: at,
          updatedAt: at,
        };
        await prisma.trainingJob.create({ data });
        return [data, await prisma.trainingJob.findUniqueOrThrow({ where: { id: data.id } })];
      },
      TrainingRecipe: async () => {
        const data = {
          id: 'rcp_fixture',
          name: 'llama-lora',
          description: 'd',
          modelType: 'llm',
          baseModel: 'meta-llama/*',
          architecture: 'llama',
          strategy: 'lora',
          image: 'trainer:1',
          command: ['python', 'train.py'],
          weightsPath: '/weights',
          createdAt: at,
          updatedAt: at,
        };
        await prisma.trainingRecipe.create({ data });
        return [data, await prisma.trainingRecipe.findUniqueOrThrow({ where: { id: data.id } })];
      },
      TrainingMetric: async () => {
        const data = { jobId: 'job_fixture', step: 10, epoch: 1.5, values: { loss: 0.5 }, at };
        const row = await prisma.trainingMetric.create({ data });
        return [data, await prisma.trainingMetric.findUniqueOrThrow({ where: { id: row.id } })];
      },
      TrainingCheckpoint: async () => {
        const data = {
          id: 'ckpt_fixture',
          jobId: 'job_fixture',
          path: 'step-10',
          epoch: 1.5,
          step: 10,
          loss: 0.5,
          sizeBytes: 7_000_000_000n,
          hostId: 'host_x',
          workloadId: 'job_fixture-r0',
          createdAt: at,
        };
        await prisma.trainingCheckpoint.create({ data });
        return [data, await prisma.trainingCheckpoint.findUniqueOrThrow({ where: { id: data.id } })];
      },
      TrainingArtifact: async () => {
        const data = {
          id: 'art_fixture',
          jobId: 'job_fixture',
          accountId,
          type: 'checkpoint',
          name: 'final/model.bin',
          path: 'model.bin',
          checkpointId: 'ckpt_fixture',
          workloadId: 'job_fixture-r0',
          hostId: 'host_x',
          sizeBytes: 9_000_000_000n,
          sha256: 'a'.repeat(64),
          fileKind: 'file',
          measuredAt: at,
          createdAt: at,
          deletedAt: at,
        };
        await prisma.trainingArtifact.create({ data });
        return [data, await prisma.trainingArtifact.findUniqueOrThrow({ where: { id: data.id } })];
      },
      TuningJob: async () => {
        const data = {
          id: 'tune_fixture',
          accountId,
          createdById: userId,
          trainingJobId: 'job_fixture',
          status: 'cancelled',
          statusReason: 'stopped',
          algorithm: 'hyperband',
          objective: 'maximize',
          metric: 'accuracy',
          searchSpace: { lr: { type: 'log_uniform', min: 0.0001, max: 0.1 } },
          settings: { maxTrials: 5 },
          form: 'short',
          samplerState: { gridNext: 3 },
          stopRequest: { reason: 'r', completeRunningTrials: true },
          completedAt: at,
          createdAt: at,
          updatedAt: at,
        };
        await prisma.tuningJob.create({ data });
        return [data, await prisma.tuningJob.findUniqueOrThrow({ where: { id: data.id } })];
      },
      Experiment: async () => {
        const data = {
          id: 'exp_fixture',
          accountId,
          createdById: userId,
          name: 'lr sweep',
          description: 'd',
          status: 'archived',
          hypothesis: 'h',
          tags: ['lr'],
          metadata: { team: 'nlp' },
          baseline: { type: 'model', name: 'v1', metrics: { loss: 0.5 } },
          conclusion: 'c',
          primaryMetric: 'accuracy',
          clonedFromId: 'exp_source',
          completedAt: at,
          archivedAt: at,
          archiveReason: 'done',
          preserveArtifacts: false,
          createdAt: at,
          updatedAt: at,
        };
        await prisma.experiment.create({ data });
        return [data, await prisma.experiment.findUniqueOrThrow({ where: { id: data.id } })];
      },
      ExperimentRun: async () => {
        const data = {
          id: 'run_fixture',
          experimentId: 'exp_fixture',
          accountId,
          createdById: userId,
          trainingJobId: 'job_fixture',
          position: 1,
          name: 'run',
          parameters: { architecture: 'bert' },
          tags: ['a'],
          notes: 'n',
          copiedFromRunId: 'run_source',
          createdAt: at,
          updatedAt: at,
        };
        await prisma.experimentRun.create({ data });
        return [data, await prisma.experimentRun.findUniqueOrThrow({ where: { id: data.id } })];
      },
      TwoFactorEnrolment: async () => {
        const data = {
          userId,
          accountId,
          secret: 'v1.sealed',
          confirmedAt: at,
          backupCodeHashes: ['ab12'],
          lastStep: 59_000_000n,
          createdAt: at,
        };
        await prisma.twoFactorEnrolment.create({ data });
        return [data, await prisma.twoFactorEnrolment.findUniqueOrThrow({ where: { userId } })];
      },
    };
    const models = Object.values(Prisma.ModelName).sort();
    const covered = Object.keys(fixtures).sort();
    const missing = models.filter((m) => !covered.includes(m));
    expect(missing, `models without a round-trip fixture: ${missing.join(', ')}`).toEqual([]);
    for (const model of Object.keys(fixtures)) {
      const [written, read] = await fixtures[model]!();
      expect(read, model).toMatchObject(written as object);
    }
  });
});
