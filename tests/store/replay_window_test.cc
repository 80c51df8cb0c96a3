#include "store/replay_window.h"

#include <gtest/gtest.h>

namespace tessera::store {
namespace {

TEST(ReplayWindowTest, EachNumberOnceInAnyOrderWithinTheWindow) {
  ReplayWindow window;
  EXPECT_TRUE(window.Accept(1));
  EXPECT_FALSE(window.Accept(1));
  EXPECT_TRUE(window.Accept(3));  // 2 still in flight
  EXPECT_TRUE(window.Accept(2));
  EXPECT_FALSE(window.Accept(2));
  EXPECT_FALSE(window.Accept(3));
  EXPECT_FALSE(window.Accept(0));  // numbers start at 1
}

TEST(ReplayWindowTest, NumbersOlderThanTheWindowAreRefused) {
  ReplayWindow window;
  EXPECT_TRUE(window.Accept(5));
  EXPECT_TRUE(window.Accept(5 + ReplayWindow::kSize));  // a jump past the window
  EXPECT_FALSE(window.Accept(5));                       // seen, and too old
  EXPECT_FALSE(window.Accept(4));                       // unseen, but too old to tell
  EXPECT_TRUE(window.Accept(6));                        // the oldest one still kept
  EXPECT_FALSE(window.Accept(6));
}

}  // namespace
}  // namespace tessera::store
