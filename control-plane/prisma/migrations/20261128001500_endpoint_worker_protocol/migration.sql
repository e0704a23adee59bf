-- The worker contract an endpoint's workers speak: 'http' (Anvil's: the control plane calls the worker's
-- port) or 'runpod' (RunPod's worker library: the worker pulls jobs from the worker API through its agent).
ALTER TABLE "endpoints" ADD COLUMN "worker_protocol" TEXT NOT NULL DEFAULT 'http';
