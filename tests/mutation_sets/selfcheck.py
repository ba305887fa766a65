"""Mutations of the mutation machinery itself: a set file's entries reach the run."""


def mutations(M):
    return [M("mutation_sets_not_loaded", "tests/mutations.py", "        MUTATIONS.extend(module.mutations(Mutation))\n",
              "        pass\n", ("tests/test_mutation_sets.py",), "feature-area mutation sets silently dropped")]
