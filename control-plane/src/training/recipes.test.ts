import { describe, expect, it } from 'vitest';
import { matchRecipe, type RecipeFields } from './recipes.ts';

const recipe = (name: string, criteria: Partial<RecipeFields>): RecipeFields => ({
  name,
  description: null,
  modelType: null,
  baseModel: null,
  architecture: null,
  strategy: null,
  image: `img/${name}`,
  command: [],
  weightsPath: null,
  ...criteria,
});

describe('training recipes', () => {
  const recipes = [
    recipe('any-lora', { strategy: 'lora' }),
    recipe('llama-lora', { modelType: 'llm', baseModel: 'meta-llama/*', strategy: 'lora' }),
    recipe('llama3-8b-lora', { modelType: 'llm', baseModel: 'meta-llama/Llama-3-8B', strategy: 'LoRA' }),
    recipe('resnet', { modelType: 'vision', architecture: 'resnet50' }),
  ];
  const wanted = (c: Partial<Parameters<typeof matchRecipe>[1]>) => ({
    modelType: 'llm',
    baseModel: null,
    architecture: null,
    strategy: null,
    ...c,
  });

  it('picks the most specific recipe whose criteria all match (exact base model over a prefix)', () => {
    expect(matchRecipe(recipes, wanted({ baseModel: 'meta-llama/llama-3-8b', strategy: 'lora' }))?.name).toBe(
      'llama3-8b-lora',
    );
    expect(matchRecipe(recipes, wanted({ baseModel: 'meta-llama/Llama-2-7b', strategy: 'lora' }))?.name).toBe(
      'llama-lora',
    );
    expect(matchRecipe(recipes, wanted({ baseModel: 'mistral/7b', strategy: 'lora' }))?.name).toBe(
      'any-lora',
    );
    expect(matchRecipe(recipes, wanted({ modelType: 'vision', architecture: 'ResNet50' }))?.name).toBe(
      'resnet',
    );
  });

  it('finds none when a named criterion differs or the request leaves it out', () => {
    expect(matchRecipe(recipes, wanted({ baseModel: 'meta-llama/Llama-3-8B', strategy: 'full' }))).toBeNull();
    expect(matchRecipe(recipes, wanted({ modelType: 'llm', architecture: 'resnet50' }))).toBeNull();
    expect(matchRecipe([], wanted({ strategy: 'lora' }))).toBeNull();
  });
});
