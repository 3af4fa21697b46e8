// ACTORFLOW_API marks what libactorflow exports: the library is compiled with
// hidden visibility, so only the classes and functions of the public headers
// carrying this mark are visible to an application. A new public function or
// class needs it (the install test's programs fail to link without it);
// internal headers never carry it: this tree's programs and tests link the
// objects whole (actorflow::internal) and see everything.
#pragma once

#define ACTORFLOW_API __attribute__((visibility("default")))
