import { describe, expect, it } from 'vitest';
import { parseListQuery, resolveCreate, type TemplateDefaultsLike } from './requests.ts';

const now = new Date('2026-11-23T12:00:00Z');
const template: TemplateDefaultsLike = {
  templateId: 'tmpl_pytorch',
  dockerImage: 'pytorch/pytorch:2.4',
  env: { A: 'template', B: 'template' },
  ports: [{ internal_port: 8888, protocol: 'tcp', description: 'Jupyter' }],
  startupScript: 'jupyter lab',
  defaults: { gpu_type: 'A100', gpu_count: 2, cpu_cores: 8, memory_gb: 32, storage_gb: 100 },
  limits: { min: {}, max: {} },
  gpuTypes: [],
};

describe('create requests', () => {
  it('applies the template under the request: request fields win, env merged, ports united', () => {
    const resolved = resolveCreate(
      {
        name: 'n',
        template_id: 'tmpl_pytorch',
        gpu_type: 'H100',
        cpu_cores: 4,
        env: { B: 'request', C: 'request' },
        ports: [{ internal_port: 8888, description: 'Lab' }, { internal_port: 22 }],
      },
      template,
      now,
    );
    expect(resolved).toMatchObject({
      templateId: 'tmpl_pytorch',
      dockerImage: 'pytorch/pytorch:2.4',
      gpuType: 'H100',
      gpuCount: 2,
      cpuCores: 4,
      memoryGb: 32,
      storageGb: 100,
      env: { A: 'template', B: 'request', C: 'request' },
      command: ['sh', '-c', 'jupyter lab'],
      ports: [
        { internal_port: 22, protocol: 'tcp', description: '' },
        { internal_port: 8888, protocol: 'tcp', description: 'Lab' },
      ],
    });
    expect(resolveCreate({ name: 'n', command: ['python', 'x.py'] }, template, now).command).toEqual([
      'python',
      'x.py',
    ]);
  });

  it('fills defaults without a template and refuses what cannot run', () => {
    expect(resolveCreate({ name: 'n', docker_image: 'img', gpu_type: 'T4' }, null, now)).toMatchObject({
      gpuCount: 1,
      cpuCores: 1,
      memoryGb: 1,
      storageGb: 10,
      command: [],
      sshEnabled: false,
    });
    expect(() => resolveCreate({ name: 'n', gpu_type: 'T4' }, null, now)).toThrow(/docker_image/);
    expect(() => resolveCreate({ name: 'n', docker_image: 'img' }, null, now)).toThrow(/gpu_type/);
    expect(() =>
      resolveCreate(
        { name: 'n', docker_image: 'img', gpu_type: 'T4', expires_at: '2026-11-23T11:00:00Z' },
        null,
        now,
      ),
    ).toThrow(/future/);
  });
});

describe('list query', () => {
  it('parses every parameter with defaults', () => {
    expect(parseListQuery({})).toMatchObject({
      page: 1,
      limit: 20,
      sortBy: 'created_at',
      sortOrder: 'desc',
      includeMetrics: false,
    });
    expect(
      parseListQuery({
        page: '2',
        limit: '100',
        status: 'running',
        sort_by: 'cost',
        sort_order: 'asc',
        include_metrics: 'true',
      }),
    ).toMatchObject({
      page: 2,
      limit: 100,
      status: 'running',
      sortBy: 'cost',
      sortOrder: 'asc',
      includeMetrics: true,
    });
  });

  it('reports every bad parameter at once', () => {
    try {
      parseListQuery({ limit: '500', status: 'x', foo: 'bar' });
      expect.unreachable();
    } catch (error) {
      expect(error).toMatchObject({ code: 'INVALID_PARAMETERS' });
      expect(Object.keys((error as { details: object }).details).sort()).toEqual(['foo', 'limit', 'status']);
    }
  });
});
