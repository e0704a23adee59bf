-- What happened to each host, for the operators' timeline: joined, connected, disconnected, unreachable,
-- recovered, cordoned, uncordoned, deleted, and GPU health changes. Written in the same statement or
-- transaction as the change it records; kept as long as the host.
CREATE TABLE "host_events" (
    "id" BIGSERIAL NOT NULL,
    "host_id" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "type" TEXT NOT NULL,
    "message" TEXT NOT NULL,
    "detail" JSONB,

    CONSTRAINT "host_events_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "host_events_host_id_fkey" FOREIGN KEY ("host_id") REFERENCES "hosts"("id") ON DELETE CASCADE ON UPDATE CASCADE
);

CREATE INDEX "host_events_host_id_id_idx" ON "host_events"("host_id", "id");
