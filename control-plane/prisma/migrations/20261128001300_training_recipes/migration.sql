-- Training recipes: what managed training runs for a (modelType, baseModel, architecture, strategy). Each
-- null criterion matches anything; the most specific recipe that matches a request wins. Operators' rows,
-- read by every account.
CREATE TABLE "training_recipes" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT,
    "model_type" TEXT,
    "base_model" TEXT,
    "architecture" TEXT,
    "strategy" TEXT,
    "image" TEXT NOT NULL,
    "command" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "weights_path" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "training_recipes_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "training_recipes_name_key" ON "training_recipes"("name");
