"""The input LayerNorm's affine folded into the first layer (agent_layers.fold_norm / AgentLinear.forward_normed) and
where the MLP trunk and the Hyper actor take it."""

AL = "src/hypermappo/models/agent_layers.py"
HY = "src/hypermappo/models/hyper.py"
T = "tests/test_feature_norm_fold.py"
EQUAL = f"{T}::test_folded_network_equals_the_unfolded_one_with_its_gradients"
TAKEN = f"{T}::test_fold_is_taken_in_differentiated_forwards_only"


def mutations(M):
    return [
        M("fold_scale_dropped", AL,
          "return norm.weight.unsqueeze(-1) * w, bias",
          "return w, bias",
          (f"{EQUAL}[mlp]",),
          "the LayerNorm's scale left out of the folded weights"),
        M("fold_shift_dropped", AL,
          "bias + (norm.bias.unsqueeze(1) @ w).squeeze(1)",
          "bias + 0 * (norm.bias.unsqueeze(1) @ w).squeeze(1)",
          (f"{EQUAL}[mlp]",),
          "the LayerNorm's shift left out of the folded bias"),
        M("fold_shift_through_folded_weights", AL,
          "return norm.weight.unsqueeze(-1) * w, bias + (norm.bias.unsqueeze(1) @ w).squeeze(1)",
          "w = norm.weight.unsqueeze(-1) * w\n    return w, bias + (norm.bias.unsqueeze(1) @ w).squeeze(1)",
          (f"{EQUAL}[mlp]",),
          "the shift multiplied by the already scaled weights (the scale applied to it twice)"),
        M("fold_taken_without_gradients", AL,
          "if self.fold_feature_norm and torch.is_grad_enabled():",
          "if self.fold_feature_norm:",
          (f"{TAKEN}[mlp]",),
          "the fold also in no-grad forwards (collection), where it only adds work"),
        M("fold_never_taken", AL,
          "if self.fold_feature_norm and torch.is_grad_enabled():",
          "if False:",
          (f"{TAKEN}[mlp]",),
          "the fold wired to nothing: the update pays the first layer's input-gradient product again"),
        M("hyper_fold_over_a_generated_first_layer", HY,
          "fold = t.fold_feature_norm and torch.is_grad_enabled() and (static or 0 not in by_layer)",
          "fold = t.fold_feature_norm and torch.is_grad_enabled()",
          (f"{EQUAL}[hyper-obs-all]",),
          "the fold taken where the first layer is generated per sample (its increment would be skipped)"),
        M("hyper_static_fold_not_normalised", HY,
          "            x = F.layer_norm(x, (x.shape[-1],), eps=fold.eps)\n",
          "",
          (f"{EQUAL}[hyper-id]",),
          "the agent-id path folds the affine but never normalises its input"),
        M("hyper_static_fold_on_every_layer", HY,
          "by_layer.get(i), fold if i == 0 else None))",
          "by_layer.get(i), fold))",
          (f"{EQUAL}[hyper-id]",),
          "the input LayerNorm folded into every layer of the agent-id path"),
    ]
