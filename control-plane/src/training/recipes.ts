import { ApiError, newId } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { TrainingRecipe } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { JobInput } from './config.ts';

/** What a managed request asks for; null: not named. */
export interface RecipeCriteria {
  modelType: string;
  baseModel: string | null;
  architecture: string | null;
  strategy: string | null;
}

/** A recipe as the operator writes it (every criterion optional: null matches anything). */
export interface RecipeFields {
  name: string;
  description: string | null;
  modelType: string | null;
  baseModel: string | null;
  architecture: string | null;
  strategy: string | null;
  image: string;
  command: string[];
  weightsPath: string | null;
}

/** What a job keeps of the recipe it was made from (config.recipe): later edits of the recipe leave it be. */
export interface RecipeSnapshot {
  id: string;
  name: string;
  weightsPath: string | null;
}

const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

function baseModelMatches(pattern: string, requested: string): boolean {
  if (pattern.endsWith('*')) return requested.toLowerCase().startsWith(pattern.slice(0, -1).toLowerCase());
  return same(pattern, requested);
}

/** How many criteria the recipe names when all of them match the request; null when one does not. */
function specificity(recipe: RecipeFields, wanted: RecipeCriteria): number | null {
  let named = 0;
  if (recipe.modelType !== null) {
    if (!same(recipe.modelType, wanted.modelType)) return null;
    named += 1;
  }
  const pairs = [
    [recipe.baseModel, wanted.baseModel, baseModelMatches],
    [recipe.architecture, wanted.architecture, same],
    [recipe.strategy, wanted.strategy, same],
  ] as const;
  for (const [have, want, matches] of pairs) {
    if (have === null) continue;
    if (want === null || !matches(have, want)) return null;
    // An exact base model is more specific than a prefix.
    named += have.endsWith('*') ? 1 : 2;
  }
  return named;
}

/** The most specific recipe whose criteria all match (ties: by name), or null. */
export function matchRecipe<R extends RecipeFields>(recipes: readonly R[], wanted: RecipeCriteria): R | null {
  let best: { recipe: R; score: number } | null = null;
  for (const recipe of recipes) {
    const score = specificity(recipe, wanted);
    if (score === null) continue;
    if (!best || score > best.score || (score === best.score && recipe.name < best.recipe.name))
      best = { recipe, score };
  }
  return best?.recipe ?? null;
}

function text(value: unknown): string | null {
  return typeof value === 'string' && value.trim() !== '' ? value.trim() : null;
}

/**
 * The managed-training criteria of a job input, or null when the job is not managed: it names its own
 * image, brings its own code (config.command, short-form customCode), or names none of baseModel,
 * architecture, strategy.
 */
export function managedCriteria(input: JobInput, imageGiven: boolean): RecipeCriteria | null {
  if (imageGiven || input.customCode !== null || input.command.length > 0) return null;
  const config = input.config;
  const modelConfig = (config['modelConfig'] ?? {}) as Record<string, unknown>;
  const criteria = {
    modelType: input.modelType,
    baseModel: text(config['baseModel']) ?? text(modelConfig['baseModel']),
    architecture: text(config['architecture']),
    strategy: text(config['strategy']),
  };
  if (criteria.baseModel === null && criteria.architecture === null && criteria.strategy === null)
    return null;
  return criteria;
}

export function recipeNotFound(id: string): ApiError {
  return new ApiError('TRAINING_RECIPE_NOT_FOUND', `training recipe ${id} not found`, { recipeId: id });
}

/** The public shape of a recipe (the admin routes and the customers' read-only list). */
export function viewRecipe(recipe: TrainingRecipe) {
  return {
    id: recipe.id,
    name: recipe.name,
    description: recipe.description,
    modelType: recipe.modelType,
    baseModel: recipe.baseModel,
    architecture: recipe.architecture,
    strategy: recipe.strategy,
    image: recipe.image,
    command: recipe.command,
    weightsPath: recipe.weightsPath,
    createdAt: recipe.createdAt.toISOString(),
    updatedAt: recipe.updatedAt.toISOString(),
  };
}

/**
 * The operators' training recipes (README: Training recipes) and the mapping of managed requests onto them.
 * Nothing here fetches weights: the recipe's image holds them (or its entrypoint reads them from where the
 * operator put them), so the control plane never downloads a model.
 */
export class TrainingRecipes {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  list(): Promise<TrainingRecipe[]> {
    return this.db.prisma.trainingRecipe.findMany({ orderBy: [{ name: 'asc' }] });
  }

  async get(id: string): Promise<TrainingRecipe> {
    const row = await this.db.prisma.trainingRecipe.findUnique({ where: { id } });
    if (!row) throw recipeNotFound(id);
    return row;
  }

  async create(fields: RecipeFields): Promise<TrainingRecipe> {
    const now = this.clock.now();
    await this.#nameFree(fields.name, null);
    return this.db.prisma.trainingRecipe.create({
      data: { id: newId('rcp'), ...fields, createdAt: now, updatedAt: now },
    });
  }

  async update(id: string, fields: Partial<RecipeFields>): Promise<TrainingRecipe> {
    await this.get(id);
    if (fields.name !== undefined) await this.#nameFree(fields.name, id);
    return this.db.prisma.trainingRecipe.update({
      where: { id },
      data: { ...fields, updatedAt: this.clock.now() },
    });
  }

  /** Jobs made from it keep running (they hold their image, command and a snapshot of the recipe). */
  async delete(id: string): Promise<void> {
    const deleted = await this.db.prisma.trainingRecipe.deleteMany({ where: { id } });
    if (deleted.count === 0) throw recipeNotFound(id);
  }

  async #nameFree(name: string, self: string | null): Promise<void> {
    const taken = await this.db.prisma.trainingRecipe.findUnique({ where: { name } });
    if (taken && taken.id !== self)
      throw new ApiError('TRAINING_RECIPE_EXISTS', `a training recipe named ${name} exists`, {
        name,
        recipeId: taken.id,
      });
  }

  /**
   * A managed request (managedCriteria) becomes a job of its recipe's image and entrypoint, with a
   * snapshot of the recipe in config.recipe; other requests pass through. No recipe matches: 422
   * NO_TRAINING_RECIPE listing the recipes that exist, and nothing runs.
   */
  async apply(input: JobInput, imageGiven: boolean): Promise<JobInput> {
    const wanted = managedCriteria(input, imageGiven);
    if (!wanted) return input;
    const recipes = await this.list();
    const recipe = matchRecipe(recipes, wanted);
    if (!recipe) {
      throw new ApiError(
        'NO_TRAINING_RECIPE',
        `no training recipe runs ${[wanted.modelType, wanted.baseModel, wanted.architecture, wanted.strategy].filter(Boolean).join(' / ')}; give config.image to run your own trainer, or ask the operator for a recipe`,
        {
          requested: wanted,
          available: recipes.map((r) => ({
            name: r.name,
            modelType: r.modelType,
            baseModel: r.baseModel,
            architecture: r.architecture,
            strategy: r.strategy,
          })),
        },
      );
    }
    const snapshot: RecipeSnapshot = { id: recipe.id, name: recipe.name, weightsPath: recipe.weightsPath };
    return {
      ...input,
      image: recipe.image,
      command: recipe.command,
      config: {
        ...input.config,
        recipe: snapshot,
        baseModel: wanted.baseModel,
        architecture: wanted.architecture,
        strategy: wanted.strategy,
      },
    };
  }
}
