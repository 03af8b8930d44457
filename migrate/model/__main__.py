"""``python -m migrate.model > plans/plan.schema.json``: the plan's JSON schema."""

import json

from migrate.model.plan_tree import plan_schema

if __name__ == "__main__":
    print(json.dumps(plan_schema(), indent=2))
