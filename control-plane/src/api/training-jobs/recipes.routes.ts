import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { type RecipeFields, viewRecipe } from '../../training/recipes.ts';
import { actorOf, DateTime, Nullable } from '../accounts/common.ts';
import { requireOperator } from '../admin/operator.ts';

const Criterion = (description: string) =>
  Nullable(Type.String({ minLength: 1, maxLength: 200, description }));

const RecipeBody = {
  name: Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' }),
  description: Type.Optional(Nullable(Type.String({ maxLength: 1000 }))),
  modelType: Type.Optional(
    Nullable(
      Type.Union(['llm', 'vision', 'multimodal', 'custom'].map((t) => Type.Literal(t))),
      // null or absent: any model type
    ),
  ),
  baseModel: Type.Optional(Criterion('Exact name, or a prefix ending in * (meta-llama/*); null: any')),
  architecture: Type.Optional(Criterion('config.architecture it runs (vision); null: any')),
  strategy: Type.Optional(Criterion('config.strategy it runs (lora, full, ...); null: any')),
  image: Type.String({
    minLength: 1,
    maxLength: 512,
    description: 'Docker image holding the trainer and its weights',
  }),
  command: Type.Optional(
    Type.Array(Type.String({ maxLength: 4096 }), {
      maxItems: 64,
      description: "The entrypoint; [] or absent keeps the image's own",
    }),
  ),
  weightsPath: Type.Optional(
    Nullable(
      Type.String({ pattern: '^/', maxLength: 512, description: 'Where the weights are in the image' }),
    ),
  ),
};

const CreateRecipeBody = Type.Object(RecipeBody, { additionalProperties: false });
const UpdateRecipeBody = Type.Partial(Type.Object(RecipeBody), { additionalProperties: false });

const Recipe = Type.Object({
  id: Type.String(),
  name: Type.String(),
  description: Nullable(Type.String()),
  modelType: Nullable(Type.String()),
  baseModel: Nullable(Type.String()),
  architecture: Nullable(Type.String()),
  strategy: Nullable(Type.String()),
  image: Type.String(),
  command: Type.Array(Type.String()),
  weightsPath: Nullable(Type.String()),
  createdAt: DateTime,
  updatedAt: DateTime,
});
const RecipeList = Type.Object({ recipes: Type.Array(Recipe) });
const RecipeParams = Type.Object({ recipe_id: Type.String({ maxLength: 64 }) });

export const RECIPES =
  'Training recipes: what managed training runs. A job that names config.baseModel (short form ' +
  'modelConfig.baseModel), config.architecture or config.strategy and gives no image and no code of its own ' +
  '(config.image, config.command, customCode) runs the recipe whose criteria all match it (modelType, ' +
  'baseModel: exact, or a prefix ending in *, compared without case; architecture; strategy; a null criterion ' +
  'matches anything), the most specific one winning (an exact baseModel counts twice, ties by name): its image ' +
  'and its command as the entrypoint, which reads ANVIL_BASE_MODEL, ANVIL_ARCHITECTURE, ANVIL_STRATEGY, ' +
  'ANVIL_MODEL_TYPE, ANVIL_RECIPE, ANVIL_WEIGHTS_PATH (the recipe weightsPath: where the weights are inside ' +
  'the image), the hyperparameters (ANVIL_HPARAMS, ANVIL_HP_<NAME>) and the dataset (ANVIL_DATASET_FILE), as ' +
  'in the trainer contract. Weights come from the recipe image (pulled from its registry like any image, or ' +
  'pre-loaded on the hosts); the control plane never downloads a model. No recipe matches: 422 ' +
  'NO_TRAINING_RECIPE {requested, available} and no job is made. A job keeps its image, command and ' +
  'config.recipe {id, name, weightsPath} when its recipe later changes or goes.';

/** /v2/admin/training-recipes: the operators' recipes (owners and admins of the operators' account). */
export const adminTrainingRecipeRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  app.addHook('onRequest', requireOperator(context));
  const recipes = context.training.recipes;
  const tags = ['admin'];
  const config = { scope: 'training' as const };
  const fields = (body: Partial<RecipeFields>) =>
    Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined)) as Partial<RecipeFields>;

  app.get(
    '/v2/admin/training-recipes',
    {
      config,
      schema: {
        tags,
        summary: 'Training recipes',
        description: RECIPES,
        response: { 200: RecipeList, ...flatErrors(401, 403, 429) },
      },
    },
    async () => ({ recipes: (await recipes.list()).map(viewRecipe) }),
  );

  app.post(
    '/v2/admin/training-recipes',
    {
      config,
      schema: {
        tags,
        summary: 'Register a training recipe',
        description: `${RECIPES} A name already used: 409 TRAINING_RECIPE_EXISTS.`,
        body: CreateRecipeBody,
        response: { 201: Recipe, ...flatErrors(400, 401, 403, 409, 429) },
      },
    },
    async (request, reply) => {
      const b = request.body;
      const created = await recipes.create({
        name: b.name,
        description: b.description ?? null,
        modelType: b.modelType ?? null,
        baseModel: b.baseModel ?? null,
        architecture: b.architecture ?? null,
        strategy: b.strategy ?? null,
        image: b.image,
        command: b.command ?? [],
        weightsPath: b.weightsPath ?? null,
      });
      return reply.code(201).send(viewRecipe(created));
    },
  );

  app.get(
    '/v2/admin/training-recipes/:recipe_id',
    {
      config,
      schema: {
        tags,
        summary: 'One training recipe',
        params: RecipeParams,
        response: { 200: Recipe, ...flatErrors(401, 403, 404, 429) },
      },
    },
    async (request) => viewRecipe(await recipes.get(request.params.recipe_id)),
  );

  app.put(
    '/v2/admin/training-recipes/:recipe_id',
    {
      config,
      schema: {
        tags,
        summary: 'Change a training recipe (fields not given keep theirs; null clears a criterion)',
        description: 'Jobs already made from the recipe keep what they were made with.',
        params: RecipeParams,
        body: UpdateRecipeBody,
        response: { 200: Recipe, ...flatErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request) =>
      viewRecipe(
        await recipes.update(request.params.recipe_id, fields(request.body as Partial<RecipeFields>)),
      ),
  );

  app.delete(
    '/v2/admin/training-recipes/:recipe_id',
    {
      config,
      schema: {
        tags,
        summary: 'Delete a training recipe',
        description: 'Jobs already made from the recipe keep running and can be resumed.',
        params: RecipeParams,
        response: {
          200: Type.Object({ id: Type.String(), deleted: Type.Literal(true) }),
          ...flatErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      await recipes.delete(request.params.recipe_id);
      return { id: request.params.recipe_id, deleted: true as const };
    },
  );
};

/** GET /v2/training/recipes: the recipes every account may run, read-only. */
export const trainingRecipeRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  app.get(
    '/v2/training/recipes',
    {
      config: { scope: 'training' as const, service: true },
      schema: {
        tags: ['training jobs'],
        summary: 'The training recipes managed training runs',
        description: `Read-only list of the operator's recipes (any member whose role reads clusters). ${RECIPES}`,
        response: { 200: RecipeList, ...flatErrors(401, 403, 429) },
      },
    },
    async (request) => {
      await context.training.service.requireAccess(actorOf(request), 'read');
      return { recipes: (await context.training.recipes.list()).map(viewRecipe) };
    },
  );
};
