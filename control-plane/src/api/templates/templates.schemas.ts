import { Type } from '@sinclair/typebox';
import { StringEnum } from '../../accounts/settings-schema.ts';
import { GPU_TYPES } from '../../scheduler/gpu-types.ts';
import { SEMVER_PATTERN, TEMPLATE_CATEGORIES, TEMPLATE_FRAMEWORKS } from '../../templates/rules.ts';
import { TEMPLATE_SORTS } from '../../templates/templates.ts';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) =>
  Type.Union([schema, Type.Null()]);
const DateTime = Type.String({ format: 'date-time' });
const Enum = StringEnum;

export const TemplateId = Type.String({ minLength: 1, maxLength: 64, pattern: '^tmpl_[a-z0-9_]+$' });
export const TemplateParams = Type.Object({ template_id: TemplateId }, { additionalProperties: false });

const Name = Type.String({
  minLength: 1,
  maxLength: 100,
  pattern: '\\S',
  description: 'Unique among the live templates of the same account and project (409 TEMPLATE_NAME_EXISTS)',
});
const ProjectId = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' });
const DockerImage = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^[a-z0-9][a-z0-9._/:@-]*[A-Za-z0-9_.-]$|^[a-z0-9]$',
  description: 'Image reference as `docker pull` takes it: [registry/]repository[:tag][@digest]',
});
const Count = (minimum: number, maximum: number) => Type.Integer({ minimum, maximum });

const Bounds = Type.Object(
  {
    gpu_count: Type.Optional(Count(0, 8)),
    cpu_cores: Type.Optional(Count(1, 256)),
    memory_gb: Type.Optional(Count(1, 4096)),
    storage_gb: Type.Optional(Count(1, 100_000)),
  },
  { additionalProperties: false },
);

const DefaultConfigurationInput = Type.Object(
  {
    gpu_type: Type.Optional(Enum(GPU_TYPES)),
    gpu_count: Type.Optional(Count(0, 8)),
    cpu_cores: Type.Optional(Count(1, 256)),
    memory_gb: Type.Optional(Count(1, 4096)),
    storage_gb: Type.Optional(Count(1, 100_000)),
  },
  {
    additionalProperties: false,
    description:
      'Defaults applied when a cluster is created from the template (request fields override them). ' +
      'estimated_hourly_cost is computed, not accepted.',
  },
);

const EnvMap = Type.Record(Type.String(), Type.String({ maxLength: 4096 }), {
  maxProperties: 100,
  propertyNames: { pattern: '^[A-Za-z_][A-Za-z0-9_]{0,254}$' },
  description: 'Container environment; names are shell identifiers',
});

const PortMappingInput = Type.Object(
  {
    internal_port: Count(1, 65535),
    protocol: Type.Optional(Enum(['tcp', 'udp'] as const)),
    description: Type.Optional(Type.String({ maxLength: 200 })),
    required: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

const templateFields = {
  name: Name,
  description: Type.String({ maxLength: 1000 }),
  category: Enum(TEMPLATE_CATEGORIES),
  docker_image: DockerImage,
  default_configuration: DefaultConfigurationInput,
  framework: Type.Optional(Nullable(Enum(TEMPLATE_FRAMEWORKS))),
  project_id: Type.Optional(Nullable(ProjectId)),
  environment_variables: Type.Optional(EnvMap),
  startup_script: Type.Optional(Nullable(Type.String({ maxLength: 65_536 }))),
  port_mappings: Type.Optional(Type.Array(PortMappingInput, { maxItems: 20 })),
  required_packages: Type.Optional(
    Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { maxItems: 100 }),
  ),
  software_versions: Type.Optional(
    Type.Record(Type.String({ minLength: 1, maxLength: 64 }), Type.String({ maxLength: 64 }), {
      maxProperties: 50,
    }),
  ),
  gpu_compatible: Type.Optional(Type.Boolean()),
  min_resources: Type.Optional(Nullable(Bounds)),
  max_resources: Type.Optional(Nullable(Bounds)),
  compatibility: Type.Optional(
    Nullable(
      Type.Object(
        {
          gpu_types: Type.Optional(Type.Array(Enum(GPU_TYPES), { maxItems: 10 })),
          regions: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 32 }), { maxItems: 20 })),
          min_driver_version: Type.Optional(Nullable(Type.String({ pattern: '^\\d+(\\.\\d+){0,2}$' }))),
        },
        { additionalProperties: false },
      ),
    ),
  ),
  tags: Type.Optional(
    Type.Array(Type.String({ minLength: 1, maxLength: 50 }), { maxItems: 20, uniqueItems: true }),
  ),
  is_public: Type.Optional(Type.Boolean()),
  version: Type.Optional(
    Type.String({ pattern: SEMVER_PATTERN, description: 'MAJOR.MINOR.PATCH; default 1.0.0 on create' }),
  ),
  version_notes: Type.Optional(Nullable(Type.String({ maxLength: 2000 }))),
};

export const CreateTemplateBody = Type.Object(templateFields, { additionalProperties: false });

export const UpdateTemplateBody = Type.Partial(
  Type.Object({ ...templateFields, is_deprecated: Type.Boolean() }, { additionalProperties: false }),
);

export const ListTemplatesQuery = Type.Object(
  {
    category: Type.Optional(Enum(TEMPLATE_CATEGORIES)),
    framework: Type.Optional(Enum(TEMPLATE_FRAMEWORKS)),
    gpu_compatible: Type.Optional(Type.Boolean()),
    official: Type.Optional(Type.Boolean()),
    project_id: Type.Optional(ProjectId),
    search: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    sort_by: Type.Optional(Enum(TEMPLATE_SORTS)),
    sort_order: Type.Optional(Enum(['asc', 'desc'] as const)),
    include_deprecated: Type.Optional(Type.Boolean({ default: false })),
  },
  { additionalProperties: false },
);

const Resources = Nullable(
  Type.Object(
    {
      gpu_count: Type.Optional(Type.Integer()),
      cpu_cores: Type.Optional(Type.Integer()),
      memory_gb: Type.Optional(Type.Integer()),
      storage_gb: Type.Optional(Type.Integer()),
    },
    { additionalProperties: false },
  ),
);

export const Template = Type.Object(
  {
    id: Type.String({ description: 'tmpl_<id>' }),
    name: Type.String(),
    description: Type.String(),
    category: Type.String(),
    framework: Nullable(Type.String()),
    version: Type.String({ description: 'Semantic version of the current content' }),
    version_notes: Nullable(Type.String()),
    docker_image: Type.String(),
    gpu_compatible: Type.Boolean(),
    official: Type.Boolean(),
    project_id: Nullable(Type.String()),
    default_configuration: Type.Object({
      gpu_type: Nullable(Type.String()),
      gpu_count: Nullable(Type.Integer()),
      cpu_cores: Nullable(Type.Integer()),
      memory_gb: Nullable(Type.Integer()),
      storage_gb: Nullable(Type.Integer()),
      estimated_hourly_cost: Nullable(
        Type.Number({
          description:
            'USD per hour: the GPU price table rate of gpu_type × gpu_count; null when the type has no price',
        }),
      ),
    }),
    environment_variables: Type.Record(Type.String(), Type.String()),
    startup_script: Nullable(Type.String()),
    port_mappings: Type.Array(
      Type.Object({
        internal_port: Type.Integer(),
        protocol: Type.String(),
        description: Type.String(),
        required: Type.Boolean(),
      }),
    ),
    required_packages: Type.Array(Type.String()),
    software_versions: Type.Record(Type.String(), Type.String()),
    resource_limits: Nullable(Type.Object({ min_resources: Resources, max_resources: Resources })),
    compatibility: Nullable(Type.Object({}, { additionalProperties: true })),
    usage_statistics: Type.Object(
      {
        total_deployments: Type.Integer({
          description:
            "The caller's account's clusters ever created from this template (deleted ones included)",
        }),
        active_clusters: Type.Integer({ description: 'Of those, the ones running now' }),
        success_rate: Nullable(
          Type.Number({
            description:
              'Percentage (0-100, two decimals) of those clusters no longer pending or starting that ever ' +
              'reached running (running, stopping or stopped now, an open billing session, or at least one ' +
              'closed GPU session in usage_records); null while none has left pending/starting',
          }),
        ),
      },
      {
        description:
          "Counted over the caller's account only (other accounts' deployments of an official template are " +
          'not disclosed)',
      },
    ),
    tags: Type.Array(Type.String()),
    created_by: Nullable(
      Type.Object(
        {
          user_id: Nullable(Type.String()),
          username: Nullable(Type.String({ description: "The member's username, else their name" })),
          organization: Nullable(Type.String({ description: 'The account name' })),
        },
        { description: 'null for official templates' },
      ),
    ),
    created_at: DateTime,
    updated_at: DateTime,
    is_public: Type.Boolean(),
    is_deprecated: Type.Boolean(),
  },
  { $id: 'ClusterTemplate' },
);

const TemplateRef = Type.Ref('ClusterTemplate');

export const TemplateList = Type.Object({
  templates: Type.Array(TemplateRef),
  total_count: Type.Integer(),
  filters_applied: Type.Object({}, { additionalProperties: true }),
});

export const ShortTemplateList = Type.Object({
  templates: Type.Array(
    Type.Object({
      id: Type.String(),
      name: Type.String(),
      description: Type.String(),
      imageName: Type.String(),
      category: Type.String(),
      official: Type.Boolean(),
      gpuRequired: Type.Boolean({ description: 'default_configuration.gpu_count is above 0' }),
    }),
  ),
});

export const DeletedTemplate = Type.Object({
  id: Type.String(),
  name: Type.String(),
  deleted: Type.Literal(true),
  deleted_at: DateTime,
  active_clusters: Type.Integer({
    description: 'Clusters created from it still running: they keep their configuration',
  }),
});

export const TemplateVersions = Type.Object({
  template_id: Type.String(),
  current_version: Type.String(),
  versions: Type.Array(
    Type.Object({
      version: Type.String(),
      version_notes: Nullable(Type.String()),
      created_at: DateTime,
      created_by: Nullable(Type.String({ description: 'User id; null for seeded official versions' })),
      snapshot: Type.Object(
        {},
        { additionalProperties: true, description: 'The template fields at that version' },
      ),
    }),
  ),
});
