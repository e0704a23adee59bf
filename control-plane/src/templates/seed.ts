import type { Prisma } from '../db/generated/client.ts';

/**
 * Official templates, seeded at start-up (accountId null, official true). Images and versions are the
 * upstream projects' published tags; software_versions state only what the tag itself names. Resource
 * defaults are Anvil's suggestion for the image, not a measurement. Changing an entry here: raise its
 * `version`, and the next start-up updates the row and records the version.
 */
export interface OfficialTemplate {
  id: string;
  name: string;
  description: string;
  category: string;
  framework: string | null;
  version: string;
  versionNotes: string;
  dockerImage: string;
  defaultConfiguration: Record<string, unknown>;
  environmentVariables: Record<string, string>;
  startupScript: string | null;
  portMappings: { internal_port: number; protocol: 'tcp' | 'udp'; description: string; required: boolean }[];
  requiredPackages: string[];
  softwareVersions: Record<string, string>;
  resourceLimits: Prisma.InputJsonValue | null;
  compatibility: Prisma.InputJsonValue | null;
  tags: string[];
}

export const OFFICIAL_TEMPLATES: OfficialTemplate[] = [
  {
    id: 'tmpl_official_pytorch',
    name: 'PyTorch 2.5.1 (CUDA 12.4)',
    description: 'Official PyTorch runtime image with CUDA 12.4 and cuDNN 9 for training and inference.',
    category: 'ml',
    framework: 'pytorch',
    version: '1.0.0',
    versionNotes: 'pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime',
    dockerImage: 'pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime',
    defaultConfiguration: { gpu_type: 'A100', gpu_count: 1, cpu_cores: 8, memory_gb: 32, storage_gb: 100 },
    environmentVariables: {},
    startupScript: null,
    portMappings: [],
    requiredPackages: ['torch'],
    softwareVersions: { pytorch: '2.5.1', cuda: '12.4', cudnn: '9' },
    resourceLimits: { min_resources: { gpu_count: 1 }, max_resources: { gpu_count: 8 } },
    compatibility: {
      gpu_types: ['A100', 'H100', 'RTX4090', 'V100', 'T4'],
      regions: [],
      min_driver_version: null,
    },
    tags: ['pytorch', 'cuda', 'training'],
  },
  {
    id: 'tmpl_official_tensorflow',
    name: 'TensorFlow 2.17.0 with Jupyter',
    description: 'Official TensorFlow GPU image with a Jupyter server on port 8888.',
    category: 'ml',
    framework: 'tensorflow',
    version: '1.0.0',
    versionNotes: 'tensorflow/tensorflow:2.17.0-gpu-jupyter',
    dockerImage: 'tensorflow/tensorflow:2.17.0-gpu-jupyter',
    defaultConfiguration: { gpu_type: 'A100', gpu_count: 1, cpu_cores: 8, memory_gb: 32, storage_gb: 100 },
    environmentVariables: {},
    startupScript: null,
    portMappings: [{ internal_port: 8888, protocol: 'tcp', description: 'Jupyter server', required: true }],
    requiredPackages: ['tensorflow'],
    softwareVersions: { tensorflow: '2.17.0' },
    resourceLimits: { min_resources: { gpu_count: 1 }, max_resources: { gpu_count: 8 } },
    compatibility: {
      gpu_types: ['A100', 'H100', 'RTX4090', 'V100', 'T4'],
      regions: [],
      min_driver_version: null,
    },
    tags: ['tensorflow', 'jupyter'],
  },
  {
    id: 'tmpl_official_tgi',
    name: 'Hugging Face Text Generation Inference 2.4.0',
    description:
      'Serves a Hugging Face model over HTTP with text-generation-inference; set MODEL_ID to the model to load.',
    category: 'production',
    framework: 'huggingface',
    version: '1.0.0',
    versionNotes: 'ghcr.io/huggingface/text-generation-inference:2.4.0',
    dockerImage: 'ghcr.io/huggingface/text-generation-inference:2.4.0',
    defaultConfiguration: { gpu_type: 'H100', gpu_count: 1, cpu_cores: 8, memory_gb: 64, storage_gb: 200 },
    // The model of TGI's own quick-start example; the launcher reads it from MODEL_ID.
    environmentVariables: { MODEL_ID: 'HuggingFaceH4/zephyr-7b-beta' },
    startupScript: null,
    portMappings: [{ internal_port: 80, protocol: 'tcp', description: 'TGI HTTP API', required: true }],
    requiredPackages: [],
    softwareVersions: { 'text-generation-inference': '2.4.0' },
    resourceLimits: { min_resources: { gpu_count: 1 }, max_resources: { gpu_count: 8 } },
    compatibility: { gpu_types: ['A100', 'H100', 'RTX4090'], regions: [], min_driver_version: null },
    tags: ['huggingface', 'llm', 'inference'],
  },
  {
    id: 'tmpl_official_jupyter',
    name: 'Jupyter PyTorch Notebook (CUDA 12)',
    description: 'Jupyter Docker Stacks pytorch-notebook, CUDA 12 variant: JupyterLab on port 8888.',
    category: 'dev',
    framework: 'pytorch',
    version: '1.0.0',
    versionNotes: 'quay.io/jupyter/pytorch-notebook:cuda12-latest',
    dockerImage: 'quay.io/jupyter/pytorch-notebook:cuda12-latest',
    defaultConfiguration: { gpu_type: 'RTX4090', gpu_count: 1, cpu_cores: 4, memory_gb: 16, storage_gb: 50 },
    environmentVariables: {},
    startupScript: null,
    portMappings: [{ internal_port: 8888, protocol: 'tcp', description: 'JupyterLab', required: true }],
    requiredPackages: ['jupyterlab', 'torch'],
    softwareVersions: { cuda: '12' },
    resourceLimits: { min_resources: { gpu_count: 1 }, max_resources: { gpu_count: 4 } },
    compatibility: {
      gpu_types: ['A100', 'H100', 'RTX4090', 'V100', 'T4'],
      regions: [],
      min_driver_version: null,
    },
    tags: ['jupyter', 'notebook', 'pytorch'],
  },
];
