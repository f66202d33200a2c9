import math

import torch

from graphcost.models.losses import RankingLoss, listmle, mse, pairwise_hinge


def test_hinge_with_margin_hand_computed():
    s = torch.tensor([[0.0, 0.05, 1.0]])
    r = torch.tensor([[1.0, 2.0, 3.0]])
    # pairs (0,1): 0.1 − 0.05 = 0.05; (0,2), (1,2): beyond the margin → 0
    assert math.isclose(pairwise_hinge(s, r, margin=0.1).item(), 0.05 / 3, rel_tol=1e-6)
    wrong = torch.tensor([[1.0, 0.0, 0.0]])  # slowest-looking first: all pairs violated
    expected = ((0.1 + 1.0) + (0.1 + 1.0) + (0.1 + 0.0)) / 3
    assert math.isclose(pairwise_hinge(wrong, r, margin=0.1).item(), expected, rel_tol=1e-6)


def test_hinge_ignores_ties_and_padding():
    s = torch.tensor([[0.0, 5.0, -9.0]])
    r = torch.tensor([[1.0, 1.0, 0.5]])
    mask = torch.tensor([[True, True, False]])
    assert pairwise_hinge(s, r, mask).item() == 0.0  # the only real pair is a tie


def test_listmle_hand_computed():
    s = torch.tensor([[1.0, 0.0]])
    r = torch.tensor([[2.0, 1.0]])  # config 1 is faster: true order (1, 0); u = −s = (0, −1)
    expected = (math.log(math.exp(0) + math.exp(-1)) - 0.0 + 0.0) / 2
    assert math.isclose(listmle(s, r).item(), expected, rel_tol=1e-6)


def test_listmle_stable_for_huge_scores_and_shift_invariant():
    torch.manual_seed(0)
    s = torch.randn(3, 16, dtype=torch.float64)
    r = torch.rand(3, 16, dtype=torch.float64)
    base = listmle(s, r)
    for scale_shift in (1e4, 1e8):
        shifted = listmle(s + scale_shift, r)
        assert torch.isfinite(shifted) and abs(shifted.item() - base.item()) < 1e-6
    big = (s * 1e6).float().requires_grad_()
    loss = listmle(big, r.float())
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(big.grad).all()


def test_listmle_padding_has_finite_gradients_and_no_effect():
    s = torch.tensor([[0.3, -0.2, 7.0]], requires_grad=True)
    r = torch.tensor([[1.0, 2.0, 0.0]])
    mask = torch.tensor([[True, True, False]])
    loss = listmle(s, r, mask)
    loss.backward()
    assert torch.isfinite(s.grad).all() and s.grad[0, 2] == 0
    assert math.isclose(loss.item(), listmle(s[:, :2].detach(), r[:, :2]).item(), rel_tol=1e-6)


def test_mse_zero_at_standardised_log_runtime_and_mix_weights():
    r = torch.tensor([[1.0, 10.0, 100.0]])
    z = torch.log(r)
    z = (z - z.mean()) / z.std(unbiased=False)
    assert mse(z, r).item() < 1e-10
    s = torch.tensor([[0.2, 0.1, -0.4]])
    mix = RankingLoss("hinge:1,listmle:0.5,mse:2", margin=0.2)
    expected = pairwise_hinge(s, r, margin=0.2) + 0.5 * listmle(s, r) + 2 * mse(s, r)
    assert math.isclose(mix(s, r).item(), expected.item(), rel_tol=1e-6)
