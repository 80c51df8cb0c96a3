// CartPole: a pole balanced on a cart, the classic control task (Barto,
// Sutton & Anderson 1983; the dynamics of OpenAI Gym's CartPole-v1), in C++
// so that the observers need no simulator.
//
// State: cart position and velocity, pole angle and angular velocity.
// Action 0 pushes the cart left, 1 right (10 N). Reward 1 per step; the
// episode ends when the pole leans past 12 degrees, the cart leaves
// [-2.4, 2.4], or after `max_steps`.
#pragma once

#include <array>
#include <cstdint>
#include <random>

namespace tessera::examples {

class CartPole {
 public:
  explicit CartPole(uint64_t seed, int max_steps = 200) : rng_(seed), max_steps_(max_steps) {}

  // A new episode from a small random state; returns it.
  std::array<float, 4> Reset();
  // Applies `action`; returns whether the episode is over.
  bool Step(int action);

  const std::array<float, 4>& state() const { return state_; }
  int steps() const { return steps_; }

 private:
  std::mt19937_64 rng_;
  const int max_steps_;
  std::array<float, 4> state_{};
  int steps_ = 0;
};

}  // namespace tessera::examples
